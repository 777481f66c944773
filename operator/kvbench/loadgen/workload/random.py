"""Article 000's sweeps: random prompts of fixed or distributed length, never repeated.

A repeated prompt would hit the prefix cache and fake throughput, so every prompt (warm-up
and measured alike) is checked against all earlier ones and redrawn if equal.
"""

from kvbench.api.workload import RandomWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.request import Phase, Request, Sequence
from kvbench.loadgen.workload.tokens import draw_length, render_text, rng_for, token_ids

__all__ = ["random_sequence"]

_REDRAWS = 1000


def random_sequence(
    spec: RandomWorkload,
    concurrency: int,
    seed: int,
    warmups: int,
    space: TokenSpace,
    text: bool,
) -> Sequence:
    """`warmups` warm-up requests then `spec.requests_for(concurrency)` measured ones."""
    seen: set[tuple[int, ...]] = set()

    def build(phase: Phase, count: int) -> list[Request]:
        lengths, tokens = rng_for(seed, "lengths", phase), rng_for(seed, "prompts", phase)
        out = []
        for index in range(count):
            n_in = draw_length(lengths, spec.input_tokens)
            n_out = draw_length(lengths, spec.output_tokens)
            ids = tuple(token_ids(tokens, n_in, space))
            for _ in range(_REDRAWS):
                if ids not in seen:
                    break
                ids = tuple(token_ids(tokens, n_in, space))
            else:
                raise ValueError(f"cannot draw {count} distinct prompts of {n_in} tokens")
            seen.add(ids)
            out.append(
                Request(
                    phase=phase,
                    index=index,
                    prompt=render_text(list(ids)) if text else ids,
                    prompt_tokens=n_in,
                    max_tokens=n_out,
                )
            )
        return out

    warm = build("warmup", warmups)
    return Sequence(warmup=warm, measured=build("measured", spec.requests_for(concurrency)))
