"""The workers: pools of identical vLLM pods, and named variants of the engine."""

from pydantic import Field

from kvbench.api.base import SpecModel
from kvbench.api.engine import EngineOverrides
from kvbench.api.kube import DNS_LABEL, Placement, Resources
from kvbench.api.names import LiteralArg
from kvbench.api.units import ByteSize

__all__ = ["PoolSimulation", "Variant", "WorkerPool"]


class PoolSimulation(SpecModel):
    """Which GPU this pool stands for when the simulator replaces vLLM."""

    profile: LiteralArg | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Timing profile name (see `kvbench sim --help`)",
    )
    gpu_memory_bytes: ByteSize | None = Field(None, description="Memory of the simulated GPU")


class WorkerPool(Placement):
    """A group of identical worker pods with one placement and one resource shape.

    Several pools express mixed hardware, e.g. four pods time-sliced on one 24 GB GPU and one
    pod on each of two 8 GB GPUs.
    """

    name: str = Field(..., pattern=DNS_LABEL)
    replicas: int = Field(..., ge=1, le=256)
    resources: Resources = Field(default_factory=Resources)
    simulation: PoolSimulation | None = None


class Variant(SpecModel):
    """A named change of the engine flags; every variant runs on its own fresh servers."""

    name: str = Field(..., pattern=DNS_LABEL)
    engine: EngineOverrides = Field(default_factory=EngineOverrides)
