"""The workers: pools of identical vLLM pods, and named variants of the engine."""

from pydantic import Field

from kvbench.api.base import SpecModel
from kvbench.api.engine import EngineOverrides
from kvbench.api.kube import DNS_LABEL, Placement, Resources
from kvbench.api.names import DnsSubdomain, LiteralArg
from kvbench.api.units import ByteSize

__all__ = [
    "SHM_BYTES",
    "SHM_BYTES_TENSOR_PARALLEL",
    "SIMULATOR_REQUESTS",
    "VLLM_REQUESTS",
    "PoolSimulation",
    "Variant",
    "WorkerPool",
]

VLLM_REQUESTS = {"cpu": "2", "memory": "8Gi"}
"""A vLLM worker's requests where the pool names neither: its API server and engine core
processes (tokenizing, scheduling, streaming) hold several GiB and want their CPU under
contention; vLLM's Kubernetes guide requests 2 CPUs. No default limit: a throttled API server
would become the measured latency, and a memory limit the OOM of a large model's load."""
SIMULATOR_REQUESTS = {"cpu": "250m", "memory": "256Mi"}
"""`kvbench sim serve`'s requests: one asyncio process, no weights."""
SHM_BYTES = 2 << 30
"""/dev/shm of a single-GPU worker (vLLM's Kubernetes guide mounts 2Gi)."""
SHM_BYTES_TENSOR_PARALLEL = 16 << 30
"""/dev/shm when tensorParallelSize > 1, where NCCL and vLLM's shared-memory broadcast
between ranks live (llm-d-benchmark mounts 16Gi, production-stack 20Gi)."""


class PoolSimulation(SpecModel):
    """Which GPU this pool stands for when the simulator replaces vLLM."""

    profile: LiteralArg | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Timing profile name (see `kvbench sim --help`)",
    )
    gpu_memory_bytes: ByteSize | None = Field(None, description="Memory of the simulated GPU")
    workers_per_gpu: int = Field(
        1,
        ge=1,
        le=64,
        description="Workers of this pool that share one simulated GPU, in order (the first "
        "k on one GPU, the next k on the next): a step's GPU time is multiplied by the number "
        "of them running a step when it starts, as time-slicing divides a GPU (local and "
        "virtual runs; docs/simulator.md)",
    )


class WorkerPool(Placement):
    """A group of identical worker pods with one placement and one resource shape.

    Several pools express mixed hardware, e.g. four pods time-sliced on one 24 GB GPU and one
    pod on each of two 8 GB GPUs.
    """

    name: str = Field(..., pattern=DNS_LABEL)
    replicas: int = Field(..., ge=1, le=256)
    resources: Resources = Field(
        default_factory=Resources,
        description="Resources of each replica. CPU and memory the pool names in neither "
        "requests nor limits are requested at 2 CPUs and 8Gi for vLLM (250m and 256Mi under "
        "the simulator); no default limit",
    )
    shm_size: ByteSize | None = Field(
        None,
        description="Size of the memory-backed /dev/shm (the runtime's own is 64 MiB, too "
        "small for tensor parallelism); default 2Gi, 16Gi when tensorParallelSize > 1. It "
        "counts against a memory limit",
    )
    runtime_class_name: DnsSubdomain | None = Field(
        None,
        description="RuntimeClass of the pool's pods, e.g. nvidia where the GPU Operator "
        "installs the NVIDIA runtime as a RuntimeClass and not as the node's default",
    )
    simulation: PoolSimulation | None = None

    def shm_bytes(self, tensor_parallel_size: int | None) -> int:
        """The size of the pool's /dev/shm for an engine of this tensor parallel size."""
        if self.shm_size is not None:
            return self.shm_size
        return SHM_BYTES_TENSOR_PARALLEL if (tensor_parallel_size or 1) > 1 else SHM_BYTES


class Variant(SpecModel):
    """A named change of the engine flags; every variant runs on its own fresh servers."""

    name: str = Field(..., pattern=DNS_LABEL)
    engine: EngineOverrides = Field(default_factory=EngineOverrides)
