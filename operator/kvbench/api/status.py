"""The experiment's status and its run records.

The status a user reads on the resource stays small (phase, conditions, progress, the current
run, the last finished run's figures, the aggregate, where the full records are); every run's
record, per pod, lives in the results store (`RunRecord`).
"""

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from kvbench.api.base import ApiModel
from kvbench.api.load import Point
from kvbench.api.workload import TraceInfo

__all__ = [
    "AggregatePoint",
    "AttemptFailure",
    "Condition",
    "ConditionType",
    "CurrentRun",
    "EngineEnvDefault",
    "ExperimentPhase",
    "ExperimentProgress",
    "ExperimentStatus",
    "LastRun",
    "PodFigures",
    "PodResult",
    "ResultsLocation",
    "RunPlacement",
    "RunRecord",
    "RunSummary",
    "ServiceBalancing",
]


class ExperimentPhase(StrEnum):
    """Where the experiment is."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """The condition types kvbench sets (Kubernetes conventions: each True, False or Unknown).

    `Reconciling` and `Stalled` are kstatus's abnormal-true pair, which Flux and `kubectl wait`
    style tools read: True while the experiment is under way, True once it failed."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    WORKERS_READY = "WorkersReady"
    SPEC_CHANGED = "SpecChanged"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


class Condition(ApiModel):
    """A Kubernetes-style condition. `lastTransitionTime` changes only when `status` does;
    `kvbench.api.conditions.set_condition` is the one place that applies that rule."""

    type: str = Field(..., min_length=1)
    status: str = Field(..., pattern=r"^(True|False|Unknown)$")
    reason: str = Field(..., pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class EngineEnvDefault(ApiModel):
    """An environment variable kvbench set on a server start, which neither the experiment
    nor the user set, and why (a package the engine would import is missing, ...)."""

    value: str
    reason: str = Field(..., description="Why kvbench set it, e.g. flashinfer is not installed")


_LEGACY_DEFAULTS = re.compile(
    r"^(?P<image>.*) \(kvbench set (?P<set>[^:()]+): (?P<reason>[^()]*)\)$"
)
"""How records before `engineEnvDefaults` named them: appended to the image, e.g. `vllm 0.25.0
(kvbench set VLLM_USE_FLASHINFER_SAMPLER=0: a package it needs is not installed)`."""


class PodResult(ApiModel):
    """One worker pod over one run's measured window, and what that pod was."""

    pod: str
    uid: str | None = Field(None, description="Pod UID (local: one per process start)")
    node: str | None = None
    address: str | None = None
    image: str | None = Field(
        None,
        description="What the server is, as measured: the container image its pod status "
        "reported, or the engine and the version it reported (local)",
    )
    engine_env_defaults: dict[str, EngineEnvDefault] = Field(
        default_factory=dict,
        description="Environment variables kvbench set on this server start, by name, with why",
    )
    gpu_product: str | None = None
    gpu_index: str | None = None
    restart_count: int | None = Field(None, description="Container restarts at the window's end")
    kv_cache_tokens: int | None = Field(
        None, description="KV cache size of this server start, as the server reported it"
    )
    configured_kv_cache_tokens: int | None = Field(
        None, description="KV cache size the engine was told to use, when it reports none"
    )
    startup_seconds: float | None = None
    prefix_cache_queries: float = Field(0, description="Tokens queried in the window")
    prefix_cache_hits: float = Field(0, description="Tokens hit in the window")
    preemptions: float = 0
    requests: float = Field(0, description="Successful requests in the window")
    prompt_tokens: float = 0
    generation_tokens: float = 0
    server_ttft_mean: float | None = Field(
        None,
        description="The server's own mean TTFT in the window (its "
        "vllm:time_to_first_token_seconds histogram: receipt to first token, without the "
        "network and a router in front)",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_image_note(cls, data: Any) -> Any:
        """A record written before `engineEnvDefaults` existed names them in its image: read
        them out of it, so that `image` is the version alone."""
        if not isinstance(data, dict):
            return data
        if data.get("engineEnvDefaults") or data.get("engine_env_defaults"):
            return data
        image = data.get("image")
        found = _LEGACY_DEFAULTS.match(image) if isinstance(image, str) else None
        if found is None:
            return data
        pairs = [p.strip().split("=", 1) for p in found["set"].split(",")]
        if not all(len(p) == 2 and p[0] for p in pairs):
            return data
        reason = found["reason"].strip()
        data = {
            k: v for k, v in data.items() if k not in ("engineEnvDefaults", "engine_env_defaults")
        }
        data["image"] = found["image"]
        data["engineEnvDefaults"] = {n: {"value": v, "reason": reason} for n, v in pairs}
        return data


class TurnResult(ApiModel):
    """One turn of a conversation workload over every conversation of a run (or, in an
    aggregate, the median over trials)."""

    turn: int = Field(..., ge=1)
    requests: int = 0
    request_hit_rate: float | None = None
    token_hit_rate: float | None = Field(None, description="cached_tokens / prompt_tokens")
    ttft_p50: float | None = None


class RunSummary(ApiModel):
    """The figures of one run. Latencies in seconds (simulated seconds under a simulator)."""

    requests: int = 0
    errors: int = 0
    request_hit_rate: float | None = Field(None, description="Share of requests with cached tokens")
    token_hit_rate: float | None = Field(None, description="Hit tokens / queried tokens (counters)")
    requests_per_second: float | None = None
    output_tokens_per_second: float | None = None
    ttft_mean: float | None = None
    ttft_p50: float | None = None
    ttft_p90: float | None = None
    ttft_p99: float | None = None
    ttft_hit_p50: float | None = None
    ttft_miss_p50: float | None = None
    itl_p50: float | None = None
    itl_p99: float | None = None
    itl_max: float | None = None
    goodput: float | None = Field(
        None, description="Requests per second that met every objective of spec.slo"
    )
    slo_attainment: float | None = Field(
        None, description="Share of measured requests that met every objective (failed: none)"
    )
    slo_met: dict[str, float] = Field(
        default_factory=dict, description="Share of measured requests that met each objective"
    )
    turns: list[TurnResult] = Field(
        default_factory=list, description="Conversation workloads: hit rates and TTFT per turn"
    )
    client_bound: bool = Field(False, description="The client, not the server, set the pace")
    outside_server_p50: float | None = Field(
        None,
        description="A simulator in real time: median wall seconds a request spent outside "
        "the server (client, network, router), part of its TTFT",
    )
    server_ttft_mean: float | None = Field(
        None,
        description="The servers' own mean TTFT over the window, from their TTFT histograms "
        "(on the server's clock); beside the client's (`ttftMean`), what the network and a "
        "router in front add",
    )
    latency_clock: str = Field(
        "wall",
        description="wall; simulated (the simulator's own clock); scaled (wall / time scale, "
        "for a sped-up engine that reports no clock of its own)",
    )


class AttemptFailure(ApiModel):
    """Why one attempt of a run did not produce a valid record."""

    attempt: int = Field(..., ge=1)
    reason: str
    message: str
    raw_results: str | None = Field(
        None, description="The attempt's result document, kept as evidence, never aggregated"
    )
    partial: bool = Field(False, description="The load generator was stopped before its run ended")


class ServiceBalancing(ApiModel):
    """How a Service arm spread connections over its workers, which its hit rate depends on:
    kube-proxy's mode as the cluster configures it, read when the arm opened, or the local
    stand-in's."""

    mode: str = Field(
        ...,
        description="kube-proxy's mode (iptables, ipvs, nftables, ...); unknown where it could "
        "not be read; local-random for kvbench run's Service stand-in",
    )
    scheduler: str | None = Field(None, description="The IPVS scheduler (rr when unset)")
    source: str = Field(..., description="Where the mode was read, or why it could not be")

    @property
    def policy(self) -> str:
        """The balancing in words: what `kvbench compare` holds two sides to."""
        if self.mode in ("iptables", "nftables", "local-random"):
            return "random per connection"
        if self.mode == "userspace" or (self.mode == "ipvs" and self.scheduler == "rr"):
            return "round robin per connection"
        if self.mode == "ipvs":
            return f"IPVS scheduler {self.scheduler} per connection"
        return "unknown"


class RunPlacement(ApiModel):
    """Where a run's load generator and its router ran: the nodes, which must not be the
    workers' GPU nodes (`local` for `kvbench run`'s processes, as its workers' node is)."""

    load_generator: str | None = Field(None, description="The load generator's node")
    router: str | None = Field(None, description="A router arm: the router's node")


class RunRecord(ApiModel):
    """One planned run's outcome: its figures, or (`error` set) why it failed for good."""

    id: str
    index: int = Field(..., ge=0)
    attempt: int = Field(1, ge=1, description="The attempt these figures come from")
    arm: str
    variant: str
    point: Point
    trial: int = Field(..., ge=1)
    seed: int
    digest: str | None = Field(None, description="Digest of the request sequence sent")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pods: list[PodResult] = Field(default_factory=list)
    summary: RunSummary = Field(default_factory=RunSummary)
    raw_results: str | None = Field(None, description="Where the full per-request results are")
    failed_attempts: list[AttemptFailure] = Field(default_factory=list)
    error: str | None = Field(None, description="Set when every attempt failed")
    error_reason: str | None = None
    service_balancing: ServiceBalancing | None = Field(
        None, description="A Service arm's balancing (kube-proxy's mode) during the run"
    )
    kv_events: dict[str, int] | None = Field(
        None,
        description="A kv_aware router arm: the KV event batches the router received from each "
        "worker pod since it started",
    )
    placement: RunPlacement | None = Field(
        None, description="The nodes of the load generator and (router arms) the router"
    )
    trace: TraceInfo | None = Field(
        None, description="A trace replay: the trace replayed (its sha256, rows and shape)"
    )


class AggregatePoint(ApiModel):
    """Median over trials for one arm x variant x point, beside the hit-rate model."""

    arm: str
    variant: str
    point: Point
    trials: int
    request_hit_rate: float | None = None
    token_hit_rate: float | None = None
    predicted_hit_rate: float | None = Field(
        None,
        description="Not measured: the request hit rate an LRU prefix cache of the workers' "
        "KV size reaches when every worker sees the whole stream (a Service), by Che's "
        "approximation under the workload's prefix popularity",
    )
    predicted_affinity_hit_rate: float | None = Field(
        None,
        description="Not measured: the same model when each worker sees only the prefixes "
        "prefix affinity gives it",
    )
    popularity: str | None = Field(
        None, description="The prefixes' popularity: uniform, zipf s=.., weights .."
    )
    kv_cache_tokens: int | None = Field(None, description="Median KV cache size of the workers")
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    requests_per_second: float | None = None
    output_tokens_per_second: float | None = None
    goodput: float | None = Field(None, description="Good requests per second (spec.slo)")
    slo_attainment: float | None = Field(None, description="Share that met every objective")
    turns: list[TurnResult] = Field(default_factory=list, description="Per turn, medians")


class ExperimentProgress(ApiModel):
    """Runs done (recorded or failed for good) out of the plan."""

    done: int = 0
    failed: int = 0
    total: int = 0
    current_run: str | None = Field(None, description="Id of the run under way")
    display: str = Field("0/0", description="done/total, for the printer column")


class CurrentRun(ApiModel):
    """The run under way and the step it is at."""

    index: int
    id: str
    stage: str
    attempt: int


class PodFigures(ApiModel):
    """One pod over the last run's window, in the few numbers a user reads first."""

    pod: str
    kv_cache_tokens: int | None = None
    hits: float = 0
    queries: float = 0
    requests: float = 0
    preemptions: float = 0


class LastRun(ApiModel):
    """The figures of the last run recorded."""

    id: str
    index: int
    attempt: int
    digest: str | None = None
    request_hit_rate: float | None = None
    token_hit_rate: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    errors: int = 0
    pods: list[PodFigures] = Field(default_factory=list)


class ResultsLocation(ApiModel):
    """Where every run's full record is kept."""

    kind: str = Field(..., description="directory, or configmaps on Kubernetes")
    location: str


class ExperimentStatus(ApiModel):
    """Status subresource of a BenchmarkExperiment."""

    phase: ExperimentPhase = ExperimentPhase.PENDING
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    progress: ExperimentProgress = Field(default_factory=ExperimentProgress)
    current: CurrentRun | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_run: LastRun | None = None
    aggregate: list[AggregatePoint] = Field(default_factory=list)
    results: ResultsLocation | None = None
    message: str | None = None
