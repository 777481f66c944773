"""The small interface between the experiment runner and a place that runs workers and load.

One runner drives every back end, so sequencing (fresh workers, warm-up, measure, collect) is
written once; a back end only knows how to start things and where they are.
"""

from abc import ABC, abstractmethod

from pydantic import BaseModel, Field

from kvbench.api import EngineSpec, ExperimentSpec, PodResult, RoutingArm, RunSummary
from kvbench.plan import PlannedRun

__all__ = ["Cluster", "LoadOutcome", "Target", "WorkerInfo"]


class WorkerInfo(BaseModel):
    """One running worker (a pod, or a local process standing in for one)."""

    name: str
    pool: str
    node: str | None = None
    base_url: str = Field(..., description="OpenAI API base, e.g. http://127.0.10.1:8000")
    metrics_url: str
    kv_cache_tokens: int | None = Field(None, description="KV cache size of this start")
    startup_seconds: float | None = None
    frontend_worker_id: int | None = Field(
        None, description="The id a front end reports per request (Dynamo's nvext worker id)"
    )


class Target(BaseModel):
    """Where the load generator sends requests for one routing arm."""

    arm: str
    url: str | None = Field(None, description="Service, router or external front end")
    pod_urls: list[str] = Field(
        default_factory=list, description="prefix-affinity: the workers, hashed by prefix"
    )
    nvext: bool = Field(
        False, description="A Dynamo frontend: ask for the serving worker of every request"
    )


class LoadOutcome(BaseModel):
    """What one run of the load generator produced, in the runner's terms."""

    summary: RunSummary
    pods: list[PodResult]
    digest: str
    raw_document: str = Field(..., description="The load generator's full result (JSON)")


class Cluster(ABC):
    """Starts workers, routing arms and load; each method leaves nothing running on failure."""

    @abstractmethod
    def problems(self, spec: ExperimentSpec) -> list[str]:
        """Why this back end cannot run `spec` (empty when it can); checked before anything
        starts, each problem naming the field."""

    @abstractmethod
    async def start_workers(
        self, spec: ExperimentSpec, variant: str, engine: EngineSpec, arm: RoutingArm
    ) -> list[WorkerInfo]:
        """Stop any workers, start fresh ones of every pool, return them once all are ready.

        The arm says which workers: vLLM pods for most arms, Dynamo's own workers (behind
        its frontend) for a `dynamo` arm. An `external` arm's workers are someone else's: a
        back end that cannot select them (the local one) returns none, and the run has no
        per-pod counters, only what the responses say.
        """

    @abstractmethod
    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        """Empty the prefix caches of running workers (freshness: reset-cache)."""

    @abstractmethod
    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo]
    ) -> Target:
        """Start what the arm needs in front of the workers (a Service, a router) and say where."""

    @abstractmethod
    async def close_arm(self) -> None:
        """Stop what `open_arm` started."""

    @abstractmethod
    async def run_load(
        self, spec: ExperimentSpec, run: PlannedRun, target: Target, workers: list[WorkerInfo]
    ) -> LoadOutcome:
        """Run the load generator for one run: warm-up, then the measured window."""

    @abstractmethod
    async def worker_logs(self, worker: WorkerInfo) -> str:
        """The log of a worker, for failures and start-up figures."""

    @abstractmethod
    async def close(self) -> None:
        """Stop everything this cluster started."""
