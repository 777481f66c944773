"""The experiment's status: phase, conditions, progress, one record per run, the aggregate."""

from datetime import UTC, datetime
from enum import StrEnum

from pydantic import Field

from kvbench.api.base import ApiModel

__all__ = [
    "AggregatePoint",
    "Condition",
    "ExperimentStatus",
    "Phase",
    "PodResult",
    "Point",
    "Progress",
    "RunRecord",
    "RunSummary",
]


class Phase(StrEnum):
    """Where the experiment is."""

    PENDING = "Pending"
    DEPLOYING = "Deploying"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Condition(ApiModel):
    """A Kubernetes-style condition; `lastTransitionTime` changes only with `status`."""

    type: str = Field(..., min_length=1)
    status: str = Field(..., pattern=r"^(True|False|Unknown)$")
    reason: str = Field(..., pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = ""
    last_transition_time: datetime = Field(default_factory=lambda: datetime.now(UTC))
    observed_generation: int | None = None


class Point(ApiModel):
    """One workload point: the concurrency, and the prefix count or request rate if any."""

    concurrency: int = Field(..., ge=1)
    prefixes: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)

    @property
    def key(self) -> str:
        """A short stable name, e.g. `p7-c8`, `c32`, `r2.5-c64`."""
        parts = []
        if self.prefixes is not None:
            parts.append(f"p{self.prefixes}")
        if self.request_rate is not None:
            parts.append(f"r{self.request_rate:g}")
        parts.append(f"c{self.concurrency}")
        return "-".join(parts)


class PodResult(ApiModel):
    """One worker pod over one run's measured window."""

    pod: str
    node: str | None = None
    address: str | None = None
    kv_cache_tokens: int | None = Field(None, description="KV cache size of this server start")
    startup_seconds: float | None = None
    prefix_cache_queries: float = Field(0, description="Tokens queried in the window")
    prefix_cache_hits: float = Field(0, description="Tokens hit in the window")
    preemptions: float = 0
    requests: float = Field(0, description="Successful requests in the window")
    prompt_tokens: float = 0
    generation_tokens: float = 0


class RunSummary(ApiModel):
    """The figures of one run. Latencies in seconds (simulated seconds under a simulator)."""

    requests: int = 0
    errors: int = 0
    request_hit_rate: float | None = Field(None, description="Share of requests with cached tokens")
    token_hit_rate: float | None = Field(None, description="Hit tokens / queried tokens (counters)")
    requests_per_second: float | None = None
    output_tokens_per_second: float | None = None
    ttft_p50: float | None = None
    ttft_p90: float | None = None
    ttft_p99: float | None = None
    ttft_hit_p50: float | None = None
    ttft_miss_p50: float | None = None
    itl_p50: float | None = None
    itl_p99: float | None = None
    itl_max: float | None = None
    client_bound: bool = Field(False, description="The client, not the server, set the pace")
    latency_clock: str = Field(
        "wall",
        description="wall; simulated (the simulator's own clock); scaled (wall / time scale, "
        "for a sped-up engine that reports no clock of its own)",
    )


class RunRecord(ApiModel):
    """One finished run."""

    id: str
    index: int = Field(..., ge=0)
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
    error: str | None = None


class AggregatePoint(ApiModel):
    """Median over trials for one arm x variant x point, beside the capacity model."""

    arm: str
    variant: str
    point: Point
    trials: int
    request_hit_rate: float | None = None
    token_hit_rate: float | None = None
    predicted_hit_rate: float | None = Field(
        None,
        description="Capacity model under random balancing: min(1, held / distinct prefixes), "
        "held = KV cache tokens of a worker / prompt tokens",
    )
    affinity_bound: float | None = Field(
        None, description="Ceiling with prefix-affine routing: min(1, workers x held / prefixes)"
    )
    kv_cache_tokens: int | None = Field(None, description="Median KV cache size of the workers")
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    requests_per_second: float | None = None
    output_tokens_per_second: float | None = None


class Progress(ApiModel):
    """Runs done out of the plan, and the one under way."""

    done: int = 0
    total: int = 0
    current_run: str | None = None
    display: str = Field("0/0", description="done/total, for the printer column")


class ExperimentStatus(ApiModel):
    """Status subresource of a BenchmarkExperiment."""

    phase: Phase = Phase.PENDING
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    progress: Progress = Field(default_factory=Progress)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    runs: list[RunRecord] = Field(default_factory=list)
    aggregate: list[AggregatePoint] = Field(default_factory=list)
    message: str | None = None
