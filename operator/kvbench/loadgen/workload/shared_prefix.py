"""Article 002's workload: P shared prefixes, each request one prefix plus a unique suffix.

Measured requests are spread evenly over the prefixes (uniform popularity) and shuffled with
the seed, so the order is fixed per (point, seed) and equal in every routing arm.
"""

from kvbench.api.load import Warmup
from kvbench.api.workload import SharedPrefixWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.request import Phase, Request, Sequence
from kvbench.loadgen.workload.tokens import render_text, rng_for, token_ids

__all__ = ["shared_prefix_sequence"]


def shared_prefix_sequence(
    spec: SharedPrefixWorkload,
    prefixes: int,
    seed: int,
    warmup: Warmup,
    space: TokenSpace,
    text: bool,
) -> Sequence:
    """`warmup.requestsPerPrefix` warm-ups per prefix in prefix order, then the measured ones."""
    heads = [
        token_ids(rng_for(seed, "prefix", p), spec.prefix_tokens, space) for p in range(prefixes)
    ]
    count = spec.requests_for(prefixes)
    order = [i % prefixes for i in range(count)]
    rng_for(seed, "order").shuffle(order)
    warm_groups = [p for p in range(prefixes) for _ in range(warmup.requests_per_prefix)]

    def build(phase: Phase, groups: list[int]) -> list[Request]:
        rng = rng_for(seed, "suffix", phase)
        out = []
        for index, group in enumerate(groups):
            ids = heads[group] + token_ids(rng, spec.suffix_tokens, space)
            out.append(
                Request(
                    phase=phase,
                    index=index,
                    prompt=render_text(ids) if text else tuple(ids),
                    prompt_tokens=len(ids),
                    max_tokens=spec.output_tokens,
                    group=group,
                )
            )
        return out

    return Sequence(warmup=build("warmup", warm_groups), measured=build("measured", order))
