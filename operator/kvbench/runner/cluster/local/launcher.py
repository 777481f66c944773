"""What a local worker is: the one thing that differs between simulated and real local workers.

The local back end starts every worker the same way (registered process, `/health`, the KV
size from `/metrics`); a launcher says which process that is, what this machine needs for it,
and whether the load generator runs on the simulator's clock. `workers.py` has the
simulator's, `vllm_workers.py` real vLLM's.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import httpx

from kvbench.api import EngineEnvDefault, EngineSpec, ExperimentSpec, WorkerPool

__all__ = ["WorkerLauncher", "WorkerProcess", "WorkerSlot"]


@dataclass(frozen=True)
class WorkerSlot:
    """One worker of one start: its pool, name, place among the start's workers, seed, and
    the GPU it shares with other simulated workers (`shared_gpu_of`)."""

    pool: WorkerPool
    name: str
    ordinal: int
    seed: int
    shared_gpu: tuple[str, int] | None = None


@dataclass(frozen=True)
class WorkerProcess:
    """The command line and environment one worker is started with, and the variables of
    that environment kvbench set of its own accord (which the worker's record names)."""

    argv: list[str]
    env: dict[str, str]
    env_defaults: dict[str, EngineEnvDefault] = field(default_factory=dict)


class WorkerLauncher(ABC):
    """Starts the local back end's workers of one engine kind."""

    engine: str
    """`sim` or `vllm`, as `kvbench run --engine` names it."""
    simulated: bool
    """Whether the workers are `kvbench sim` (the load generator then runs on its clock)."""
    warm_first: bool = False
    """Start one worker alone before the others, the first time: later starts find the
    compile caches it filled instead of all filling them at once."""

    @abstractmethod
    def problems(self, spec: ExperimentSpec) -> list[str]:
        """Why these workers cannot run `spec` on this machine, each naming the field or
        option (empty when they can)."""

    @abstractmethod
    def process(
        self, spec: ExperimentSpec, engine: EngineSpec, slot: WorkerSlot, host: str, port: int
    ) -> WorkerProcess:
        """The process serving `slot` at `host:port`."""

    @abstractmethod
    async def image(self, client: httpx.AsyncClient, base_url: str) -> str:
        """What the ready worker is, with its version, as records keep it (a pod's image):
        what it reports, nothing kvbench configured."""
