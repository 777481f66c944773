"""Article 002's workload: P shared prefixes, each request one prefix plus a unique suffix.

Measured requests are shared out over the prefixes in proportion to their popularity (largest
remainders, so a run holds exactly its expected counts, not a sample of them) and shuffled
with the seed, so the order is fixed per (point, seed) and equal in every routing arm. Under
uniform popularity this is article 002's even spread, request for request.
"""

from kvbench.api.load import Warmup
from kvbench.api.workload import SharedPrefixWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.request import Phase, Request, Sequence
from kvbench.loadgen.workload.tokens import render_text, rng_for, token_ids

__all__ = ["prefix_counts", "shared_prefix_sequence"]


def prefix_counts(weights: list[float], total: int) -> list[int]:
    """`total` requests shared out in proportion to `weights` (largest remainders, ties to the
    lower prefix)."""
    whole = sum(weights)
    quotas = [total * w / whole for w in weights]
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda p: (-(quotas[p] - counts[p]), p))
    for p in by_remainder[: total - sum(counts)]:
        counts[p] += 1
    return counts


def _dealt(counts: list[int]) -> list[int]:
    """Prefixes in rounds, each round every prefix with requests left: 0, 1, .., 0, 1, .."""
    pairs = sorted((round_, p) for p, n in enumerate(counts) for round_ in range(n))
    return [p for _, p in pairs]


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
    weights = spec.popularity.weights_for(prefixes)
    order = _dealt(prefix_counts(weights, spec.requests_for(prefixes)))
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

    return Sequence(
        warmup=build("warmup", warm_groups), measured=build("measured", order), groups=prefixes
    )
