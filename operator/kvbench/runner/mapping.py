"""The one layer between the load generator's wire formats and the experiment's records.

The runner builds each run's `RunConfig` (what the Job receives) and maps the result document
(what the Job returns) onto `RunRecord`s and `PodResult`s. The load generator never sees the
resource's status types, so a status change never changes the Job's wire format.
"""

from datetime import datetime

from kvbench.api import ExperimentSpec, PodResult, RunRecord, RunSummary
from kvbench.api.status import TurnResult
from kvbench.api.workload import TraceInfo
from kvbench.loadgen.config import (
    DirectMetrics,
    LoadTarget,
    MetricsConfig,
    PrefixAffinityTarget,
    PrometheusMetrics,
    RunConfig,
    UrlTarget,
)
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.results import LoadgenResult
from kvbench.loadgen.summary import Summary, timing_on_clock
from kvbench.plan import PlannedRun
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    DynamoEndpoint,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.states import RunState

__all__ = ["build_run_config", "failed_record", "run_record", "run_summary", "ttft_samples"]


def _target(endpoint: ArmEndpoint) -> LoadTarget:
    if isinstance(endpoint, PodsEndpoint):
        return PrefixAffinityTarget(pods=endpoint.pods)
    if isinstance(endpoint, DynamoEndpoint):
        return UrlTarget(url=endpoint.url, nvext=True)
    assert isinstance(endpoint, UrlEndpoint)
    return UrlTarget(url=endpoint.url)


def _metrics(
    spec: ExperimentSpec, endpoint: ArmEndpoint, workers: list[WorkerInfo]
) -> MetricsConfig | None:
    """Per-pod counters from where `spec.metrics` says; none without workers to read."""
    if not workers:
        return None
    if spec.metrics.source == "prometheus":
        assert spec.metrics.prometheus_url is not None
        return PrometheusMetrics(url=spec.metrics.prometheus_url, pods=[w.name for w in workers])
    worker_ids = endpoint.worker_ids if isinstance(endpoint, DynamoEndpoint) else {}
    return DirectMetrics(pods={w.name: w.metrics_url for w in workers}, worker_ids=worker_ids)


def build_run_config(
    spec: ExperimentSpec,
    run: PlannedRun,
    endpoint: ArmEndpoint,
    workers: list[WorkerInfo],
    simulated: bool,
    trace: TraceInfo | None = None,
) -> RunConfig:
    """The load generator's config for one run; the simulator's time scale only when the
    workers are the simulator (a real vLLM runs on the wall clock); a trace workload's
    `trace`, the one the experiment was planned with."""
    engine = spec.engines()[run.variant]
    return RunConfig(
        run_id=run.id,
        model=engine.served_model_name or engine.model,
        api="chat" if spec.workload.conversation is not None else "completions",
        target=_target(endpoint),
        workload=spec.workload,
        point=run.point,
        seed=run.seed,
        warmup=spec.load.warmup,
        connection=spec.load.connection,
        request_timeout=spec.load.request_timeout,
        time_scale=spec.simulator.time_scale if simulated else 1.0,
        metrics=_metrics(spec, endpoint, workers),
        slo=spec.slo,
        trace=trace,
    )


def run_summary(summary: Summary, client: ClientHealth) -> RunSummary:
    """The figures a run record keeps, on the clock the summary reports."""
    clock = summary.reported
    return RunSummary(
        requests=summary.requests,
        errors=summary.errors,
        request_hit_rate=summary.hit_rates.request_hit_rate,
        token_hit_rate=summary.hit_rates.token_hit_rate_counters,
        requests_per_second=clock.requests_per_second,
        output_tokens_per_second=clock.output_tokens_per_second,
        ttft_mean=clock.ttft.mean,
        ttft_p50=clock.ttft.p50,
        ttft_p90=clock.ttft.p90,
        ttft_p99=clock.ttft.p99,
        ttft_hit_p50=clock.ttft_hit.p50,
        ttft_miss_p50=clock.ttft_miss.p50,
        itl_p50=clock.itl.p50,
        itl_p99=clock.itl.p99,
        itl_max=clock.itl.max,
        goodput=None if summary.goodput is None else summary.goodput.requests_per_second,
        slo_attainment=None if summary.goodput is None else summary.goodput.attainment,
        slo_met={} if summary.goodput is None else summary.goodput.met,
        turns=[
            TurnResult(
                turn=t.turn,
                requests=t.requests,
                request_hit_rate=t.request_hit_rate,
                token_hit_rate=t.token_hit_rate,
                ttft_p50=t.ttft_p50,
            )
            for t in summary.turns
        ],
        client_bound=client.client_bound,
        outside_server_p50=None if summary.outside_server is None else summary.outside_server.p50,
        server_ttft_mean=summary.server_ttft_mean,
        latency_clock=summary.latency_clock,
    )


def _pods(result: LoadgenResult, workers: list[WorkerInfo]) -> list[PodResult]:
    """The counter deltas of every pod, completed with what the back end knows of it."""
    by_name = {w.name: w for w in workers}
    pods = []
    for delta in result.counters.pods or []:
        worker = by_name.get(delta.pod)
        known = {}
        if worker is not None:
            known = {
                "uid": worker.uid,
                "node": worker.node,
                "address": worker.base_url,
                "image": worker.image,
                "engine_env_defaults": worker.engine_env_defaults,
                "gpu_product": worker.gpu_product,
                "gpu_index": worker.gpu_index,
                "restart_count": worker.restart_count,
                "configured_kv_cache_tokens": worker.configured_kv_cache_tokens,
                "startup_seconds": worker.startup_seconds,
            }
        measured_kv = delta.kv_cache_tokens or (worker.kv_cache_tokens if worker else None)
        pods.append(
            PodResult(
                pod=delta.pod,
                kv_cache_tokens=measured_kv,
                prefix_cache_queries=delta.prefix_cache_queries,
                prefix_cache_hits=delta.prefix_cache_hits,
                preemptions=delta.preemptions,
                requests=delta.requests,
                prompt_tokens=delta.prompt_tokens,
                generation_tokens=delta.generation_tokens,
                server_ttft_mean=delta.server_ttft_mean,
                **known,
            )
        )
    return pods


def _planned(run: PlannedRun, state: RunState) -> dict[str, object]:
    """The fields every record of a run has, figures or not."""
    return {
        "id": run.id,
        "index": run.index,
        "attempt": state.attempt,
        "arm": run.arm,
        "variant": run.variant,
        "point": run.point,
        "trial": run.trial,
        "seed": run.seed,
        "raw_results": state.raw,
    }


def run_record(
    run: PlannedRun,
    state: RunState,
    result: LoadgenResult,
    started_at: datetime | None,
    finished_at: datetime | None,
) -> RunRecord:
    """The record of a collected attempt."""
    return RunRecord(
        **_planned(run, state),
        digest=result.conditions.digest,
        started_at=started_at,
        finished_at=finished_at,
        pods=_pods(result, state.workers),
        summary=run_summary(result.summary, result.client),
        failed_attempts=state.failures,
        service_balancing=(
            state.endpoint.balancing if isinstance(state.endpoint, UrlEndpoint) else None
        ),
        kv_events=state.kv_events,
        placement=state.placement,
        trace=result.conditions.trace,
    )


def failed_record(run: PlannedRun, state: RunState, reason: str, message: str) -> RunRecord:
    """The record of a run whose every attempt failed (`state.failures` says how)."""
    return RunRecord(
        **_planned(run, state),
        failed_attempts=state.failures,
        error=f"{len(state.failures)} attempt(s) failed; last: {message}",
        error_reason=reason,
    )


def ttft_samples(result: LoadgenResult) -> list[float]:
    """TTFT of every successful measured request, on the clock the summary reports (the
    simulator's, with the time outside the server, when it reported one)."""
    simulated = result.summary.latency_clock == "simulated"
    samples = []
    for record in result.records():
        if record.phase != "measured" or not record.ok:
            continue
        ttft = timing_on_clock(record, simulated)[0]
        if ttft is not None:
            samples.append(ttft)
    return samples
