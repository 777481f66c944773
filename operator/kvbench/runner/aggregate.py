"""Medians over trials per arm x variant x point, beside the capacity model of article 002.

The model: a worker holds `held = KV cache tokens / prompt tokens` requests' worth of prefixes;
under random balancing every worker must hold every prefix, so the hit rate is about
min(1, held / distinct prefixes), whatever the number of workers. Prefix-affine routing splits
the prefixes over the workers, raising the ceiling to min(1, workers x held / prefixes).
"""

from statistics import median

from kvbench.api import AggregatePoint, ExperimentSpec, RunRecord

__all__ = ["aggregate", "capacity_model"]


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def capacity_model(
    kv_cache_tokens: float, prompt_tokens: int, prefixes: int, workers: int
) -> tuple[float, float]:
    """(random-balancing prediction, prefix-affinity ceiling) of the request hit rate."""
    held = kv_cache_tokens / prompt_tokens
    return min(1.0, held / prefixes), min(1.0, workers * held / prefixes)


def aggregate(spec: ExperimentSpec, records: list[RunRecord]) -> list[AggregatePoint]:
    """One AggregatePoint per arm x variant x point, in the order the runs first appear."""
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for record in records:
        if record.error is None:
            groups.setdefault((record.arm, record.variant, record.point.key), []).append(record)
    points = []
    for (arm, variant, _), runs in groups.items():
        summaries = [r.summary for r in runs]
        kv_tokens = _median([p.kv_cache_tokens for r in runs for p in r.pods])
        predicted = bound = None
        shared = spec.workload.shared_prefix
        if shared is not None and kv_tokens is not None and runs[0].point.prefixes:
            predicted, bound = capacity_model(
                kv_tokens, shared.prompt_tokens, runs[0].point.prefixes, spec.total_workers
            )
        points.append(
            AggregatePoint(
                arm=arm,
                variant=variant,
                point=runs[0].point,
                trials=len(runs),
                request_hit_rate=_median([s.request_hit_rate for s in summaries]),
                token_hit_rate=_median([s.token_hit_rate for s in summaries]),
                predicted_hit_rate=predicted,
                affinity_bound=bound,
                kv_cache_tokens=None if kv_tokens is None else round(kv_tokens),
                ttft_p50=_median([s.ttft_p50 for s in summaries]),
                ttft_p99=_median([s.ttft_p99 for s in summaries]),
                requests_per_second=_median([s.requests_per_second for s in summaries]),
                output_tokens_per_second=_median([s.output_tokens_per_second for s in summaries]),
            )
        )
    return points
