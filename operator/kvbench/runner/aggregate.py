"""Medians over trials per arm x variant x point, beside the model of the hit rate.

The model (`kvbench.plan.hit_model`): an LRU prefix cache of each worker's measured KV size,
fed the run's prefixes with the workload's popularity, either whole (a Service: every worker
must hold every prefix) or as prefix affinity splits them (each worker its own prefixes). It
is computed per run, from that run's workers (their KV sizes and names), then the median.
"""

from statistics import median

from kvbench.api import AggregatePoint, ExperimentSpec, RunRecord, RunSummary
from kvbench.api.status import TurnResult
from kvbench.loadgen.routing import bounded_assignment
from kvbench.plan.hit_model import RequestBlocks, affinity_hit_rate, che_hit_rate

__all__ = ["aggregate", "hit_rate_model"]


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _turns(summaries: list[RunSummary]) -> list[TurnResult]:
    """Per turn, the medians over the trials that measured it."""
    by_turn: dict[int, list[TurnResult]] = {}
    for summary in summaries:
        for t in summary.turns:
            by_turn.setdefault(t.turn, []).append(t)
    return [
        TurnResult(
            turn=turn,
            requests=round(median(t.requests for t in rows)),
            request_hit_rate=_median([t.request_hit_rate for t in rows]),
            token_hit_rate=_median([t.token_hit_rate for t in rows]),
            ttft_p50=_median([t.ttft_p50 for t in rows]),
        )
        for turn, rows in sorted(by_turn.items())
    ]


def hit_rate_model(spec: ExperimentSpec, record: RunRecord) -> tuple[float, float] | None:
    """(Service, prefix affinity) request hit rates the model gives for this run's workers;
    None without shared prefixes, the workers' KV sizes or the run's variant in the spec."""
    shared, prefixes = spec.workload.shared_prefix, record.point.prefixes
    kv_tokens = _median([p.kv_cache_tokens for p in record.pods])
    engine = spec.engines().get(record.variant)
    if shared is None or prefixes is None or kv_tokens is None or engine is None:
        return None
    block_size = engine.block_tokens
    blocks = RequestBlocks.of(
        shared.prefix_tokens, shared.prompt_tokens, shared.output_tokens, block_size
    )
    cache_blocks = kv_tokens // block_size - 1  # vLLM's null block is never handed out
    weights = shared.popularity.weights_for(prefixes)
    owners = bounded_assignment(prefixes, [p.pod for p in record.pods])
    return (
        che_hit_rate(weights, blocks, cache_blocks),
        affinity_hit_rate(weights, owners, blocks, cache_blocks),
    )


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
        models = [m for m in (hit_rate_model(spec, r) for r in runs) if m is not None]
        shared = spec.workload.shared_prefix
        points.append(
            AggregatePoint(
                arm=arm,
                variant=variant,
                point=runs[0].point,
                trials=len(runs),
                request_hit_rate=_median([s.request_hit_rate for s in summaries]),
                token_hit_rate=_median([s.token_hit_rate for s in summaries]),
                predicted_hit_rate=_median([m[0] for m in models]),
                predicted_affinity_hit_rate=_median([m[1] for m in models]),
                popularity=None if shared is None else shared.popularity.label,
                kv_cache_tokens=None if kv_tokens is None else round(kv_tokens),
                ttft_p50=_median([s.ttft_p50 for s in summaries]),
                ttft_p99=_median([s.ttft_p99 for s in summaries]),
                requests_per_second=_median([s.requests_per_second for s in summaries]),
                output_tokens_per_second=_median([s.output_tokens_per_second for s in summaries]),
                goodput=_median([s.goodput for s in summaries]),
                slo_attainment=_median([s.slo_attainment for s in summaries]),
                turns=_turns(summaries),
            )
        )
    return points
