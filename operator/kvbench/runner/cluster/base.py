"""The interface between the experiment runner and a place that runs workers and load.

One runner drives every back end, so sequencing (fresh workers, the arm, the load, collecting,
retries, resuming) is written once; a back end knows how to start things, where they are, and
what it left behind (a resumed runner asks it, it never remembers for it).
"""

import hashlib
from abc import ABC, abstractmethod
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from kvbench.api import (
    Cleanup,
    EngineEnvDefault,
    EngineSpec,
    ExperimentSpec,
    RoutingArm,
    RunPlacement,
    ServiceBalancing,
)
from kvbench.loadgen.config import RunConfig

__all__ = [
    "ArmEndpoint",
    "ChildNames",
    "Cluster",
    "DynamoEndpoint",
    "LoadState",
    "PodsEndpoint",
    "UrlEndpoint",
    "WorkerInfo",
]


class WorkerInfo(BaseModel):
    """One running worker (a pod, or a local process standing in for one), as it was when it
    became ready: what a later check compares with to see whether it restarted."""

    name: str
    pool: str
    uid: str | None = Field(None, description="Pod UID; a local worker gets one per start")
    node: str | None = None
    image: str | None = Field(
        None, description="What the server is, as measured (a pod's image, a version it reports)"
    )
    engine_env_defaults: dict[str, EngineEnvDefault] = Field(
        default_factory=dict,
        description="Variables kvbench set on this start that neither the engine nor the user "
        "set, by name, with why",
    )
    gpu_product: str | None = None
    gpu_index: str | None = None
    restart_count: int = 0
    base_url: str = Field(..., description="OpenAI API base, e.g. http://127.0.10.1:8000")
    metrics_url: str
    kv_cache_tokens: int | None = Field(None, description="KV cache size this start reported")
    configured_kv_cache_tokens: int | None = Field(
        None, description="KV cache size the engine was given, for engines that report none"
    )
    startup_seconds: float | None = None
    ready_at: datetime | None = Field(
        None, description="When the pod turned Ready: a later transition means it flipped"
    )


class UrlEndpoint(BaseModel):
    """One URL for every request: a Service, a router or an external front end."""

    kind: Literal["url"] = "url"
    arm: str
    url: str
    balancing: ServiceBalancing | None = Field(None, description="A Service arm's balancing")


class PodsEndpoint(BaseModel):
    """Prefix affinity: the load generator hashes each prefix group to one of the workers."""

    kind: Literal["pods"] = "pods"
    arm: str
    pods: dict[str, str] = Field(..., description="Pod name -> base URL")


class DynamoEndpoint(BaseModel):
    """A Dynamo frontend, which names the serving worker of every request (nvext)."""

    kind: Literal["dynamo"] = "dynamo"
    arm: str
    url: str
    worker_ids: dict[str, int] = Field(
        default_factory=dict, description="Worker name -> the id the frontend reports"
    )


ArmEndpoint = Annotated[UrlEndpoint | PodsEndpoint | DynamoEndpoint, Field(discriminator="kind")]


class ChildNames(BaseModel):
    """Names of one run attempt's children, from the experiment and the run's index and
    attempt (never from the run id, which has dots and outgrows Kubernetes' 63 characters)."""

    experiment: str
    index: int = Field(..., ge=0)
    attempt: int = Field(..., ge=1)

    @property
    def prefix(self) -> str:
        return f"{self.experiment}-r{self.index}-a{self.attempt}"

    @property
    def load(self) -> str:
        """The load generator (a Job on Kubernetes, a process locally)."""
        return f"{self.prefix}-load"

    @property
    def arm(self) -> str:
        """What the arm starts in front of the workers (a router)."""
        return f"{self.prefix}-arm"

    def worker_seed(self, seed: int, worker: str) -> int:
        """Each start of each worker gets its own seed (capacity jitter differs per start),
        from the spec's seed and the run, never from the experiment's name."""
        text = f"{seed}/r{self.index}-a{self.attempt}/{worker}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")


class LoadState(BaseModel):
    """What became of a load generator: `absent` (never started, or gone without a trace),
    `running`, `succeeded` (its result document is there) or `failed` (with the reason)."""

    phase: Literal["absent", "running", "succeeded", "failed"]
    document: bytes | None = None
    reason: str | None = None


class Cluster(ABC):
    """Starts workers, routing arms and load; each start leaves nothing running on failure.

    Failures are raised as `kvbench.runner.failures.RunFailure` subclasses, so the runner can
    retry them and the operator can name them in conditions.
    """

    @abstractmethod
    def problems(self, spec: ExperimentSpec) -> list[str]:
        """Why this back end cannot run `spec` (empty when it can); checked before anything
        starts, each problem naming the field."""

    @abstractmethod
    def uses_simulator(self, spec: ExperimentSpec) -> bool:
        """Whether the workers are `kvbench sim` (then the load generator runs on its clock)."""

    @abstractmethod
    async def recover(self, keep: ChildNames | None) -> None:
        """After a runner restart: stop whatever an earlier runner left, except the load of
        `keep` and the workers and arm it sends to (that load is adopted)."""

    @abstractmethod
    async def start_workers(
        self,
        spec: ExperimentSpec,
        variant: str,
        engine: EngineSpec,
        arm: RoutingArm,
        names: ChildNames,
    ) -> list[WorkerInfo]:
        """Stop any workers, start fresh ones of every pool, return them once all are ready.

        The arm says which workers: vLLM pods for most arms, Dynamo's own workers (behind
        its frontend) for a `dynamo` arm. An `external` arm's workers are someone else's: a
        back end that cannot select them returns none, and the run has no per-pod counters.
        """

    @abstractmethod
    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        """Empty the prefix caches of running workers (freshness: reset-cache)."""

    @abstractmethod
    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        """Start what the arm needs in front of the workers and say where to send."""

    @abstractmethod
    async def close_arm(self) -> None:
        """Stop what `open_arm` started."""

    @abstractmethod
    async def start_load(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        """Start the load generator of one attempt; a no-op when it already exists."""

    @abstractmethod
    async def load_state(self, names: ChildNames) -> LoadState:
        """What became of that attempt's load generator (never waits)."""

    @abstractmethod
    async def wait_load(self, names: ChildNames, timeout: float) -> bytes:
        """Wait for the load generator to end; its result document. Raises `LoadFailed`, or
        `RunTimeout` (after stopping it) when it outlives `timeout` seconds."""

    @abstractmethod
    async def release_load(self, names: ChildNames, keep: bool) -> None:
        """Remove an attempt's load generator once collected (kept when `keep`)."""

    @abstractmethod
    async def check_workers(self, workers: list[WorkerInfo]) -> list[str]:
        """Which of `workers` restarted, were replaced or are gone since they became ready
        (empty: every one is the same server start as then)."""

    @abstractmethod
    async def check_arm(
        self, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> dict[str, int] | None:
        """The KV event batches the arm's router received from each of `workers` (by name)
        since it started, read after the window; None for an arm that follows no KV events
        (all but a kv_aware router). `names` are the attempt's that opened the arm: a router
        kept across runs (freshness none or reset-cache) counts from its own start."""

    @abstractmethod
    async def load_placement(self, arm: RoutingArm, names: ChildNames) -> RunPlacement | None:
        """Where that attempt's load generator ran and, for a router arm, the arm's router: the
        nodes, read after the load ended (None when nothing says)."""

    @abstractmethod
    async def worker_logs(self, worker: WorkerInfo) -> str:
        """The log of a worker, for failures."""

    @abstractmethod
    async def detach(self) -> None:
        """Stop watching and leave every child running (the runner's host is going away)."""

    @abstractmethod
    async def teardown(self, cleanup: Cleanup) -> None:
        """The experiment ended: stop everything, except what `cleanup` keeps."""
