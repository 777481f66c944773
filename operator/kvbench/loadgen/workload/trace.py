"""Trace replay: one request per trace row, its prompt made block by block from its hash ids.

Block i of a row's prompt is the token block of `hash_ids[i]`: `blockTokens` tokens drawn
from the seed and that id alone, the row's last block cut to make `input_length` exactly.
Equal ids are equal blocks wherever they appear and different ids differ, so the prompts
share exactly the prefixes the trace says they share (Mooncake's ids are chain hashes: an id
already stands for the whole prefix up to it, so content per id is content per prefix). A
text prompt renders each token as one word (`render_text`), block by block, so equal ids are
equal text too.

The first `load.warmup.requests` rows are the warm-up; the rest are measured. With
`timing: trace` a measured row is sent at `(timestamp - first measured timestamp) / 1000 /
speedup` server seconds; with `timing: closed` the timestamps are ignored. Each row's group
(what prefix affinity routes on) is its first hash id, numbered in order of appearance.
"""

from kvbench.api.workload import TraceWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.mooncake import Trace, TraceRow
from kvbench.loadgen.workload.request import Phase, Request, Sequence
from kvbench.loadgen.workload.tokens import render_text, rng_for, token_ids

__all__ = ["TraceBlocks", "trace_sequence"]


class TraceBlocks:
    """The token block of every hash id: a pure function of (seed, id), drawn once."""

    def __init__(self, seed: int, block_tokens: int, space: TokenSpace) -> None:
        self.seed, self.block_tokens, self.space = seed, block_tokens, space
        self._blocks: dict[int, tuple[int, ...]] = {}

    def block(self, hash_id: int) -> tuple[int, ...]:
        found = self._blocks.get(hash_id)
        if found is None:
            rng = rng_for(self.seed, "trace-block", hash_id)
            found = self._blocks[hash_id] = tuple(token_ids(rng, self.block_tokens, self.space))
        return found

    def prompt(self, row: TraceRow) -> tuple[int, ...]:
        """The row's prompt: each hash id's block in order, the last one cut."""
        ids: list[int] = []
        for hash_id, length in zip(row.hash_ids, row.block_lengths(self.block_tokens), strict=True):
            ids += self.block(hash_id)[:length]
        return tuple(ids)


def trace_sequence(
    spec: TraceWorkload, trace: Trace, seed: int, warmups: int, space: TokenSpace, text: bool
) -> Sequence:
    """The first `warmups` rows as warm-up, the others measured, in the trace's order."""
    if warmups >= len(trace.rows):
        raise ValueError(
            f"{trace.source} has {len(trace.rows)} rows: none left to measure after "
            f"{warmups} warm-up rows"
        )
    blocks = TraceBlocks(seed, spec.block_tokens, space)
    groups: dict[int, int] = {}
    start = trace.rows[warmups].timestamp

    def build(phase: Phase, rows: tuple[TraceRow, ...]) -> list[Request]:
        out = []
        for index, row in enumerate(rows):
            ids = blocks.prompt(row)
            timed = phase == "measured" and spec.timing == "trace"
            out.append(
                Request(
                    phase=phase,
                    index=index,
                    prompt=render_text(list(ids)) if text else ids,
                    prompt_tokens=row.input_length,
                    max_tokens=row.output_length,
                    group=groups.setdefault(row.hash_ids[0], len(groups)),
                    offset=(row.timestamp - start) / 1000 / spec.speedup if timed else None,
                )
            )
        return out

    warm = build("warmup", trace.rows[:warmups])
    measured = build("measured", trace.rows[warmups:])
    return Sequence(warmup=warm, measured=measured, groups=len(groups))
