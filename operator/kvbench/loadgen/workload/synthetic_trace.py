"""A small Mooncake trace with a realistic prefix structure, for tests and examples (the real
traces are downloads; this machine has no network, and a test wants something small).

Each row is a new conversation, the next turn of an open one, or a repeat. A new conversation starts
with one of a few shared "system prompts" (chains of full blocks, asked with Zipf-like
popularity) and adds a user turn of fresh blocks, the last one partial. A next turn extends
its conversation's previous prompt: every full block again (so the trace says it shares
them), then fresh blocks: the previous partial block grew (the answer and the new question
were appended), so it is a new block with a new id, as Mooncake's chain hashes have it. A
repeat asks an earlier prompt again with the same ids and a last block of another length (as
in Mooncake's own traces, where `[46, 47]` comes with 655 and 672 tokens). Arrivals are
Poisson; ids are allocated in order, as Mooncake's are.
"""

import json
import random
from dataclasses import dataclass

from kvbench.api.workload import MOONCAKE_BLOCK_TOKENS

__all__ = ["TraceShape", "synthetic_trace", "trace_lines"]


@dataclass(frozen=True)
class TraceShape:
    """What the generated trace looks like (defaults: the example's)."""

    rows: int = 200
    rate: float = 4.0  # requests per second, Poisson
    system_prompts: tuple[int, ...] = (3, 2, 2, 1, 1)  # full blocks of each system prompt
    follow_up: float = 0.45  # chance a row is the next turn of an open conversation
    repeat: float = 0.1  # chance a row asks an earlier prompt again
    max_turns: int = 4
    turn_blocks: tuple[int, int] = (1, 2)  # fresh blocks of a user turn (partial last)
    output_tokens: tuple[int, int] = (16, 96)
    block_tokens: int = MOONCAKE_BLOCK_TOKENS


def synthetic_trace(shape: TraceShape, seed: int) -> list[dict[str, object]]:
    """The trace's rows, a pure function of (shape, seed)."""
    rng = random.Random(f"kvbench-synthetic-trace/{seed}")
    block = shape.block_tokens
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [fresh(n) for n in shape.system_prompts]
    weights = [1 / (k + 1) for k in range(len(systems))]
    open_turns: list[tuple[list[int], int]] = []  # (hash ids, turns so far)
    asked: list[list[int]] = []  # every row's hash ids so far
    rows: list[dict[str, object]] = []
    clock = 0.0
    for _ in range(shape.rows):
        draw = rng.random()
        if asked and draw < shape.repeat:
            ids = list(rng.choice(asked))
        else:
            if open_turns and draw < shape.repeat + shape.follow_up:
                previous, turns = open_turns.pop(rng.randrange(len(open_turns)))
                head = previous[:-1]
            else:
                head, turns = list(rng.choices(systems, weights)[0]), 0
            ids = head + fresh(rng.randint(*shape.turn_blocks))
            if turns + 1 < shape.max_turns:
                open_turns.append((ids, turns + 1))
        asked.append(ids)
        rows.append(
            {
                "timestamp": round(clock),
                "input_length": (len(ids) - 1) * block + rng.randint(block // 8, block),
                "output_length": rng.randint(*shape.output_tokens),
                "hash_ids": ids,
            }
        )
        clock += rng.expovariate(shape.rate) * 1000
    return rows


def trace_lines(rows: list[dict[str, object]]) -> str:
    """The rows as a Mooncake JSONL file."""
    return "".join(json.dumps(row) + "\n" for row in rows)
