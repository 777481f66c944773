"""Builds an engine from a ``SimConfig``, filling defaults the way vLLM does at start-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvbench.sim.block_pool import KVEvent
from kvbench.sim.capacity import GIB, KVCapacity, compute_capacity
from kvbench.sim.config import SimConfig
from kvbench.sim.engine import EngineCore
from kvbench.sim.geometry import ModelGeometry, resolve_geometry
from kvbench.sim.gpu_share import GpuShare
from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.metrics import EngineStats
from kvbench.sim.scheduler import Scheduler
from kvbench.sim.timing import CostModel, TimingProfile, default_profile_name, resolve_profile

__all__ = ["SimEngine", "batch_defaults", "build_engine", "capture_limit"]

_LARGE_GPU_BYTES = 70 * GIB


def batch_defaults(gpu_memory_bytes: int) -> tuple[int, int]:
    """vLLM's API-server defaults: (max_num_batched_tokens, max_num_seqs) by GPU size."""
    if gpu_memory_bytes >= _LARGE_GPU_BYTES:
        return 8192, 1024
    return 2048, 256


def capture_limit(config: SimConfig, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """The most tokens of a step CUDA graphs cover: vLLM's `max_cudagraph_capture_size`,
    by default min(2 x max_num_seqs, 512), never above the step's token budget
    (`VllmConfig._set_cudagraph_sizes`); 0 with `--enforce-eager`."""
    if config.enforce_eager:
        return 0
    size = config.max_cudagraph_capture_size
    if size is None:
        size = min(2 * max_num_seqs, 512)
    return min(size, max_num_batched_tokens)


@dataclass
class SimEngine:
    """The engine plus the resolved settings that the server reports."""

    config: SimConfig
    geometry: ModelGeometry
    profile: TimingProfile
    capacity: KVCapacity
    core: EngineCore
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_bytes: int

    @property
    def served_model_names(self) -> list[str]:
        return self.config.served_model_names

    def cache_config_info(self) -> dict[str, str]:
        """Label set of ``vllm:cache_config_info`` (CacheConfig fields as strings)."""
        c = self.config
        return {
            "block_size": str(c.block_size),
            "cache_dtype": c.kv_cache_dtype,
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "enable_prefix_caching": str(c.enable_prefix_caching),
            "gpu_memory_utilization": str(c.gpu_memory_utilization),
            "is_attention_free": "False",
            "kv_cache_memory_bytes": str(c.kv_cache_memory_bytes),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.capacity.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "prefix_caching_hash_algo": c.prefix_caching_hash_algo,
            "sliding_window": "None",
            "swap_space": "4",
            "engine": "0",
        }


def build_engine(
    config: SimConfig,
    on_kv_events: Callable[[list[KVEvent]], None] | None = None,
    profile: TimingProfile | None = None,
    gpu: GpuShare | None = None,
) -> SimEngine:
    """Resolve defaults, compute capacity (may raise like vLLM) and assemble the engine;
    `profile` replaces the named one (a profile fitted to measurements, not in the table);
    `gpu` is this worker's share of a GPU other workers use too."""
    geometry = resolve_geometry(config.model)
    if profile is None:
        profile = resolve_profile(config.profile or default_profile_name(geometry))
    gpu_bytes = config.gpu_memory_bytes or profile.gpu_memory_bytes
    max_model_len = config.max_model_len or geometry.max_position_embeddings
    if max_model_len > geometry.max_position_embeddings:
        raise ValueError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={geometry.max_position_embeddings} "
            f"in model's config.json)."
        )
    default_tokens, default_seqs = batch_defaults(gpu_bytes)
    max_num_batched_tokens = config.max_num_batched_tokens or default_tokens
    max_num_seqs = config.max_num_seqs or default_seqs
    capacity = compute_capacity(
        geometry,
        block_size=config.block_size,
        max_model_len=max_model_len,
        kv_cache_dtype=config.kv_cache_dtype,
        dtype=config.dtype,
        kv_cache_memory_bytes=config.kv_cache_memory_bytes,
        gpu_memory_bytes=gpu_bytes,
        gpu_memory_utilization=config.gpu_memory_utilization,
        non_kv_overhead_bytes=profile.non_kv_overhead_bytes,
        jitter=config.kv_capacity_jitter,
        seed=config.seed,
    )
    kv = KVCacheManager(
        capacity.num_gpu_blocks,
        block_size=config.block_size,
        max_model_len=max_model_len,
        enable_caching=config.enable_prefix_caching,
        hash_algo=config.prefix_caching_hash_algo,
        record_events=on_kv_events is not None,
    )
    scheduler = Scheduler(
        kv,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        reserve_full_isl=config.scheduler_reserve_full_isl,
        stats_at_lookup=config.prefix_cache_stats_at == "lookup",
    )
    cost = CostModel(
        geometry,
        profile,
        kv_dtype_bytes=capacity.kv_dtype_bytes,
        enforce_eager=config.enforce_eager,
        capture_limit=capture_limit(config, max_num_seqs, max_num_batched_tokens),
    )
    core = EngineCore(
        kv=kv,
        scheduler=scheduler,
        cost=cost,
        stats=EngineStats(max_model_len=max_model_len),
        on_kv_events=on_kv_events,
        async_scheduling=config.async_scheduling,
        gpu=gpu,
    )
    return SimEngine(
        config=config,
        geometry=geometry,
        profile=profile,
        capacity=capacity,
        core=core,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_bytes=gpu_bytes,
    )
