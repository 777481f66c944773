"""How runs are carried out: freshness, counters, the load generator, time limits, clean-up,
and the simulator that stands in for vLLM without a GPU."""

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from kvbench.api.base import SpecModel
from kvbench.api.kube import Placement, Resources
from kvbench.api.names import ImageRef, LiteralArg
from kvbench.api.units import ByteSize, Duration, parse_duration

if TYPE_CHECKING:
    from kvbench.api.routing import RoutingArm
    from kvbench.api.workers import WorkerPool

__all__ = [
    "LOADGEN_REQUESTS",
    "Cleanup",
    "Execution",
    "LoadGenerator",
    "MetricsSource",
    "Simulator",
    "Timeouts",
]

LOADGEN_REQUESTS = {"cpu": "1", "memory": "1Gi"}
"""The load generator's requests where the spec names neither: one asyncio event loop, which
uses one CPU at most and must get it under contention. No default limit: its memory grows
with the requests it records, and a limit would end a long run without a result."""


class MetricsSource(SpecModel):
    """Where per-pod prefix-cache counters are read before and after the measured window."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.source != 'prometheus' || has(self.prometheusUrl)",
                    "message": "source prometheus needs prometheusUrl",
                }
            ]
        }
    }

    source: Literal["direct", "prometheus"] = Field(
        "direct", description="direct: scrape every pod's /metrics; prometheus: query it"
    )
    prometheus_url: str | None = Field(None, pattern=r"^https?://[^\s]+$", max_length=2048)

    @model_validator(mode="after")
    def _url_for_prometheus(self) -> "MetricsSource":
        if self.source == "prometheus" and self.prometheus_url is None:
            raise ValueError("metrics.source prometheus needs metrics.prometheusUrl")
        return self


class LoadGenerator(Placement):
    """The GPU-less Job that sends the load. Its placement adds to the rule that keeps it off
    GPU nodes, never replaces it."""

    image: ImageRef | None = Field(None, description="Default: the operator's image")
    resources: Resources = Field(
        default_factory=Resources,
        description="CPU and memory named in neither requests nor limits are requested at 1 "
        "CPU and 1Gi; no default limit",
    )


class Timeouts(SpecModel):
    """Limits after which a run fails instead of hanging."""

    workers_ready: Duration = Field("15m", description="Fresh workers must be Ready within this")
    run: Duration = Field("1h", description="One run (warm-up + measured load) must end within")

    @property
    def workers_ready_seconds(self) -> float:
        return parse_duration(self.workers_ready)

    @property
    def run_seconds(self) -> float:
        return parse_duration(self.run)


class Execution(SpecModel):
    """How a failed run is handled."""

    retries: int = Field(
        1,
        ge=0,
        le=10,
        description="Attempts after a failed or disturbed one, each on fresh workers; then the "
        "run is recorded as failed and the others go on",
    )


class Cleanup(SpecModel):
    """What to keep after the experiment ends."""

    keep_workers: bool = Field(False, description="Leave the last workers running")
    keep_jobs: bool = Field(False, description="Keep finished load-generator Jobs and their pods")


class Simulator(SpecModel):
    """The vLLM simulator (`kvbench sim`): always used by local runs; used on a cluster only
    when `onCluster` is true (a dry run on nodes without GPUs)."""

    mode: Literal["http", "virtual"] = Field(
        "http",
        description="http: each worker a `kvbench sim` server on a scaled wall clock; virtual: "
        "workers, arm and clients in one discrete-event simulation (`kvbench run`, never on a "
        "cluster), the same answer on any machine in a fraction of the time",
    )
    on_cluster: bool = False
    image: ImageRef | None = Field(None, description="Default: the operator's image")
    profile: LiteralArg | None = Field(
        None, min_length=1, max_length=128, description="Timing profile for all pools"
    )
    gpu_memory_bytes: ByteSize | None = None
    time_scale: float = Field(
        0.05, ge=0, le=1000, description="Wall seconds per simulated second (0: never wait)"
    )
    kv_capacity_jitter: float = Field(
        0.0, ge=0, le=0.5, description="Vary KV capacity per start by up to this fraction"
    )
    router_time_scale: float | None = Field(
        1.0,
        ge=0,
        le=1000,
        description="Time scale of the runs of a router arm (vllm-router): it balances by "
        "the requests in flight on the wall clock, so its choices follow the simulated "
        "hardware only where the simulated times are long against its own latency and the "
        "machine's (1: real time; docs/simulator.md); null: timeScale. Dynamo arms keep "
        "timeScale, their mocker's speed-up",
    )

    def time_scale_of(self, arm: "RoutingArm") -> float:
        """The time scale `arm`'s runs go at (its workers and its load generator)."""
        if self.router_time_scale is not None and arm.router is not None:
            return self.router_time_scale
        return self.time_scale

    def flags(self, pool: "WorkerPool") -> list[str]:
        """The simulator-only flags of one pool's workers (the same on every back end)."""
        flags = ["--time-scale", f"{self.time_scale:g}"]
        profile = (pool.simulation and pool.simulation.profile) or self.profile
        if profile:
            flags += ["--profile", profile]
        gpu_bytes = (pool.simulation and pool.simulation.gpu_memory_bytes) or self.gpu_memory_bytes
        if gpu_bytes:
            flags += ["--gpu-memory-bytes", str(gpu_bytes)]
        if self.kv_capacity_jitter:
            flags += ["--kv-capacity-jitter", f"{self.kv_capacity_jitter:g}"]
        return flags
