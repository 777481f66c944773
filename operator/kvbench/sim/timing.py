"""How long an engine step takes: named timing profiles and a roofline cost model.

A step runs its GEMMs and its attention as separate kernels, one after the other, so its
GPU time is the sum of two rooflines: the GEMMs take ``max(dense FLOPs / FLOP/s, weight
bytes / bandwidth)`` (every scheduled token through the weights), the attention
``max(attention FLOPs / FLOP/s, KV bytes / attention bandwidth)`` (every (query, context)
pair; the KV of every scheduled request). One roofline over the whole step would hide a
mixed step's decode KV reads under its prefill's compute, which no GPU does. Paged
attention streams KV slower than a GEMM streams weights (scattered 16-token blocks, small
work items per sequence and head), so the attention has its own effective bandwidth. A
fixed per-step overhead (scheduling, sampling) is added. With ``--enforce-eager`` the host
launches every kernel itself: the step takes at least the launch time of all layers, plus a
small extra, which is why eager mode hurts small models (short steps) and barely touches
large batches (the articles: Qwen3-0.6B 168 -> 108 tok/s at concurrency 1, 1,557 -> 1,503
at 32; Qwen3-1.7B 66 -> 64).

Without ``--enforce-eager`` vLLM replays CUDA graphs only for steps of at most
``max_cudagraph_capture_size`` tokens (vLLM's default ``min(2 x max_num_seqs, 512)``, and no
more than the step's token budget); a larger step runs its compiled kernels one launch at a
time, and takes at least the host's launch time of all layers. Under async scheduling the host
starts on a step while the previous one runs, so that step's time is a head start: behind a
long prefill the launch is hidden, behind a 3 ms decode step it is not. On an H200 host this
is article 000's throughput fall from concurrency 32 to 64 (a KV-full batch admits short
prefill chunks one at a time, each a step above the 128-token capture size right after a
decode step; ``bench/results/real-vllm-0.25-h200-steps.txt``).

A calibrated profile names the published figures (``sim/figures.yaml``) its effective
numbers were fitted on, one figure per number, in ``fitted_on``; every other figure is a
prediction (``bench/sim_calibration.py`` prints both). ``roofline:<gpu>`` profiles derive
their numbers from a GPU's datasheet with fixed efficiencies, for GPUs nobody measured.
The frontend latency (HTTP, tokenization) delays a request's arrival at the engine; it is
part of TTFT as a client measures it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kvbench.sim.geometry import ModelGeometry

__all__ = [
    "GPUS",
    "PROFILES",
    "CostModel",
    "GpuSpec",
    "TimingProfile",
    "default_profile_name",
    "resolve_profile",
]

GIB = 1 << 30


class GpuSpec(BaseModel):
    """Datasheet numbers of a GPU (dense bf16 tensor FLOP/s, HBM bandwidth)."""

    model_config = ConfigDict(frozen=True)

    name: str
    memory_bytes: int
    bandwidth: float
    flops: float


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(name="h200", memory_bytes=141 * 10**9, bandwidth=4.8e12, flops=989e12),
        GpuSpec(name="h100-80gb", memory_bytes=80 * GIB, bandwidth=3.35e12, flops=989e12),
        GpuSpec(name="a100-80gb", memory_bytes=80 * GIB, bandwidth=2.04e12, flops=312e12),
        GpuSpec(name="a100-40gb", memory_bytes=40 * GIB, bandwidth=1.56e12, flops=312e12),
        GpuSpec(name="l40s", memory_bytes=48 * GIB, bandwidth=0.864e12, flops=362e12),
        GpuSpec(name="a10g", memory_bytes=24 * GIB, bandwidth=0.6e12, flops=125e12),
        GpuSpec(name="l4", memory_bytes=24 * GIB, bandwidth=0.3e12, flops=121e12),
        GpuSpec(name="rtx4090", memory_bytes=24 * GIB, bandwidth=1.008e12, flops=165e12),
        GpuSpec(name="rtx3090", memory_bytes=24 * GIB, bandwidth=0.936e12, flops=71e12),
        GpuSpec(name="t4", memory_bytes=16 * GIB, bandwidth=0.32e12, flops=65e12),
    )
}


class TimingProfile(BaseModel):
    """Effective hardware numbers of one (GPU, host) pair, plus where they came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str
    gpu_memory_bytes: int = Field(gt=0)
    non_kv_overhead_bytes: int = Field(ge=0, description="activations + non-torch memory")
    bandwidth: float = Field(gt=0, description="effective bytes/s")
    flops: float = Field(gt=0, description="effective FLOP/s")
    step_overhead_s: float = Field(ge=0)
    eager_launch_per_layer_s: float = Field(ge=0)
    eager_extra_s: float = Field(ge=0)
    uncaptured_launch_per_layer_s: float = Field(
        default=0.0,
        ge=0,
        description="host seconds per layer to launch a step no CUDA graph covers; 0: not "
        "measured on this host (such steps then cost what their kernels do)",
    )
    uncaptured_gpu_fraction: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="the share of a step beyond the CUDA graphs (its kernels' time alone) that "
        "keeps the GPU busy; the rest is the host launching them one by one, which other "
        "workers' steps on a shared GPU overlap and after which the next step is decided; 1: "
        "all of it",
    )
    frontend_s: float = Field(ge=0)
    frontend_per_token_s: float = Field(ge=0)
    attention_bandwidth: float | None = Field(
        default=None,
        gt=0,
        description="effective bytes/s the attention kernels read KV at; None: the bandwidth",
    )
    calibrated_for: str | None = None
    fitted_on: tuple[str, ...] = Field(
        default=(), description="ids of the published figures (sim/figures.yaml) fitted on"
    )


PROFILES: dict[str, TimingProfile] = {
    p.name: p
    for p in (
        TimingProfile(
            name="qwen3-1.7b-8gb",
            source="article 000: vLLM, Qwen3-1.7B bf16 on an 8 GB-class GPU",
            calibrated_for="Qwen3-1.7B",
            gpu_memory_bytes=8 * GIB,
            non_kv_overhead_bytes=1_760_000_000,
            bandwidth=260e9,
            attention_bandwidth=200e9,
            flops=30.5e12,
            step_overhead_s=0.0013,
            eager_launch_per_layer_s=0.000315,
            eager_extra_s=0.00045,
            frontend_s=0.012,
            frontend_per_token_s=0.0,
            fitted_on=(
                "a000.kv-tokens",  # non_kv_overhead_bytes
                "a000.c1.throughput",  # bandwidth
                "a000.c1.itl-median",  # bandwidth
                "a000.prefix.miss-ttft",  # flops
                "a000.prefix.hit-ttft",  # step_overhead_s, frontend_s
                "a000.eager.c1.throughput",  # eager_extra_s
                "a000.small-eager.c1.throughput",  # eager_launch_per_layer_s
                "a000.c32.itl-median",  # attention_bandwidth
            ),
        ),
        TimingProfile(
            name="qwen3-0.6b-24gb",
            source="article 002: vLLM, Qwen3-0.6B on a 24 GB GPU behind a Service",
            calibrated_for="Qwen3-0.6B",
            gpu_memory_bytes=24 * GIB,
            non_kv_overhead_bytes=2 * GIB,
            bandwidth=240e9,
            flops=45e12,
            step_overhead_s=0.0010,
            eager_launch_per_layer_s=0.000315,
            eager_extra_s=0.00045,
            frontend_s=0.0217,
            frontend_per_token_s=2e-6,
            fitted_on=("a002.miss-ttft", "a002.hit-ttft"),
        ),
        TimingProfile(
            name="qwen3-0.6b-h200",
            source="real vLLM 0.25 on an H200, Qwen3-0.6B (dummy weights), six workers "
            "time-sliced on the GPU: its step costs fitted on the ITL and throughput of one "
            "and six busy workers (two and four predicted), its prefill and frontend on one "
            "request at a time, a hit and a miss (bench/shared_gpu_check.py, "
            "bench/results/real-vllm-0.25-h200-shared.txt); the GPU share of its long steps "
            "from an H100's GPU work (bench/results/real-vllm-h100-together.txt)",
            calibrated_for="Qwen3-0.6B",
            gpu_memory_bytes=141 * 10**9,
            non_kv_overhead_bytes=int(1.5 * GIB),
            bandwidth=8.31e11,
            attention_bandwidth=4.48e12,
            flops=173e12,
            step_overhead_s=0.000443,
            eager_launch_per_layer_s=0.000315,
            eager_extra_s=0.00045,
            # GPU work of its 16.9 ms 2,048-token step: 8.4 ms on two H100 hosts (six misses at
            # once, bench/results/real-vllm-h100-together.txt), whose SMs and clocks the H200
            # has (the prefill is bound by the SMs: its faster memory does not shorten it)
            uncaptured_gpu_fraction=0.5,
            frontend_s=0.0119,
            frontend_per_token_s=1e-6,
            fitted_on=("h200.miss-ttft", "h200.hit-ttft"),  # flops, frontend_s
        ),
    )
}

_ROOFLINE_BANDWIDTH_EFF = 0.75
_ROOFLINE_FLOPS_EFF = 0.5


_UNCAPTURED_LAUNCH_PER_LAYER_S = 0.001
"""Measured on an H200 host with vLLM 0.25, Qwen3-1.7B (28 layers): steps above the CUDA-graph
capture size took 26-30 ms under --no-async-scheduling whatever their tokens (146 to 2,048;
bench/results/real-vllm-0.25-h200-steps.txt). A host's speed, not a GPU's: the roofline
profiles, for GPUs nobody measured, take it as it is."""


def _roofline(gpu: GpuSpec) -> TimingProfile:
    return TimingProfile(
        name=f"roofline:{gpu.name}",
        source=f"roofline from the {gpu.name} datasheet "
        f"({_ROOFLINE_BANDWIDTH_EFF:.0%} of bandwidth, {_ROOFLINE_FLOPS_EFF:.0%} of FLOP/s)",
        gpu_memory_bytes=gpu.memory_bytes,
        non_kv_overhead_bytes=int(1.5 * GIB),
        bandwidth=gpu.bandwidth * _ROOFLINE_BANDWIDTH_EFF,
        flops=gpu.flops * _ROOFLINE_FLOPS_EFF,
        step_overhead_s=0.002,
        eager_launch_per_layer_s=0.000315,
        eager_extra_s=0.00045,
        uncaptured_launch_per_layer_s=_UNCAPTURED_LAUNCH_PER_LAYER_S,
        frontend_s=0.005,
        frontend_per_token_s=1e-6,
    )


def resolve_profile(name: str) -> TimingProfile:
    """A calibrated profile by name, or ``roofline:<gpu>`` for a GPU in the table."""
    if name in PROFILES:
        return PROFILES[name]
    if name.startswith("roofline:") and name.split(":", 1)[1] in GPUS:
        return _roofline(GPUS[name.split(":", 1)[1]])
    known = sorted(PROFILES) + [f"roofline:{g}" for g in sorted(GPUS)]
    raise ValueError(f"unknown profile {name!r}; known: {', '.join(known)}")


def default_profile_name(geometry: ModelGeometry) -> str:
    """The calibrated profile of this model if there is one, else an A100 roofline."""
    for profile in PROFILES.values():
        if profile.calibrated_for and profile.calibrated_for.lower() == geometry.name.lower():
            return profile.name
    return "roofline:a100-80gb"


class CostModel:
    """Step time of a batch for one model on one profile (virtual seconds)."""

    __slots__ = (
        "attention_bandwidth",
        "attn_flops_per_pair",
        "bandwidth",
        "capture_limit",
        "eager_extra",
        "eager_launch",
        "enforce_eager",
        "flops",
        "flops_per_token",
        "frontend_per_token_s",
        "frontend_s",
        "kv_bytes_per_token",
        "step_overhead",
        "uncaptured_gpu_fraction",
        "uncaptured_launch",
        "weight_bytes",
    )

    def __init__(
        self,
        geometry: ModelGeometry,
        profile: TimingProfile,
        *,
        kv_dtype_bytes: int,
        enforce_eager: bool = False,
        capture_limit: int = 512,
    ) -> None:
        """`capture_limit`: the most tokens of a step CUDA graphs cover (vLLM's largest
        default; `kvbench.sim.factory.capture_limit` gives a server's own). With
        `enforce_eager` no graph covers any step, and its own launch cost applies."""
        self.flops_per_token = geometry.flops_per_token
        self.attn_flops_per_pair = geometry.attention_flops_per_pair
        self.weight_bytes = float(geometry.weight_bytes)
        self.kv_bytes_per_token = float(geometry.kv_bytes_per_token(kv_dtype_bytes))
        self.flops = profile.flops
        self.bandwidth = profile.bandwidth
        self.attention_bandwidth = profile.attention_bandwidth or profile.bandwidth
        self.step_overhead = profile.step_overhead_s
        self.eager_launch = profile.eager_launch_per_layer_s * geometry.num_layers
        self.eager_extra = profile.eager_extra_s
        self.enforce_eager = enforce_eager
        self.capture_limit = capture_limit
        self.uncaptured_launch = (
            0.0 if enforce_eager else profile.uncaptured_launch_per_layer_s * geometry.num_layers
        )
        self.uncaptured_gpu_fraction = profile.uncaptured_gpu_fraction
        self.frontend_s = profile.frontend_s
        self.frontend_per_token_s = profile.frontend_per_token_s

    def step_time(
        self,
        num_tokens: int,
        context_tokens: int,
        attention_pairs: float,
        sharing: int = 1,
        head_start: float = 0.0,
    ) -> float:
        """Seconds for a step computing ``num_tokens`` tokens.

        ``context_tokens`` is the KV the step reads (every scheduled request's context
        including its new tokens), ``attention_pairs`` the (query, key) pairs attended.
        On a shared GPU (``kvbench.sim.gpu_share``) a step CUDA graphs cover takes its
        rooflines ``sharing`` times (the workers running a step when it starts, this one
        included), the host's per-step overhead once; a step beyond them (``beyond_graphs``)
        is priced here as alone, and by the share from `uncaptured_step`'s parts where the
        GPU is shared. ``head_start``: seconds the host had to launch this step while the
        previous one ran (async scheduling), taken off the launch time of a step no CUDA
        graph covers.
        """
        if self.beyond_graphs(num_tokens):
            gpu, host, floor = self.uncaptured_step(
                num_tokens, context_tokens, attention_pairs, head_start
            )
            step = gpu + host
            return step if step > floor else floor
        step = self._kernels(num_tokens, context_tokens, attention_pairs) * sharing
        step += self.step_overhead
        if self.enforce_eager:
            return (step if step > self.eager_launch else self.eager_launch) + self.eager_extra
        return step

    def uncaptured_step(
        self, num_tokens: int, context_tokens: int, attention_pairs: float, head_start: float
    ) -> tuple[float, float, float]:
        """A step beyond the CUDA graphs in parts: its kernels' seconds alone (a share
        ``uncaptured_gpu_fraction`` of them keeping the GPU busy), the host's seconds after
        them (the per-step overhead) and the least it takes (the host's launch of its kernels,
        less ``head_start``); alone it takes the larger of the first two's sum and the last."""
        gpu = self._kernels(num_tokens, context_tokens, attention_pairs)
        launch = self.uncaptured_launch - head_start if self.uncaptured_launch > 0 else 0.0
        return gpu, self.step_overhead, launch

    def _kernels(self, num_tokens: int, context_tokens: int, attention_pairs: float) -> float:
        """The GPU seconds of a step: each of its two parts at the slower of its rooflines."""
        dense = num_tokens * self.flops_per_token / self.flops
        weights = self.weight_bytes / self.bandwidth
        attention = attention_pairs * self.attn_flops_per_pair / self.flops
        kv = context_tokens * self.kv_bytes_per_token / self.attention_bandwidth
        return (dense if dense > weights else weights) + (attention if attention > kv else kv)

    def beyond_graphs(self, num_tokens: int) -> bool:
        """Whether a step has more tokens than the largest CUDA graph vLLM captured; never in
        eager mode, where no step is captured and each is launched as the others are."""
        return num_tokens > self.capture_limit and not self.enforce_eager

    def uncaptured(self, num_tokens: int) -> bool:
        """Whether a step of `num_tokens` pays a launch time no CUDA graph saves."""
        return self.uncaptured_launch > 0 and self.beyond_graphs(num_tokens)

    def frontend_latency(self, num_prompt_tokens: int) -> float:
        """Seconds between a request's arrival at the server and at the engine."""
        return self.frontend_s + self.frontend_per_token_s * num_prompt_tokens
