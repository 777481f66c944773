"""KV cache capacity computed the way vLLM v1 computes it, plus its start-up log lines.

vLLM (``kv_cache_utils.get_num_blocks``): ``num_blocks = available // page_size // layers``
with ``page_size = 2 * block_size * kv_heads * head_dim * dtype_bytes`` (the geometry's
``page_bytes``). ``blocks_for_bytes`` is that rule alone, for engines that take a block count
(Dynamo's mocker) and must hold what a simulator worker holds. The available
bytes are ``--kv-cache-memory-bytes`` when given, else ``total_gpu_memory *
gpu_memory_utilization`` minus what profiling found in use (weights, activations,
non-torch allocations). The simulator cannot profile, so the profile states the
non-KV overhead, and ``--kv-capacity-jitter`` reproduces the start-to-start spread the
articles saw on the profiled path (22,048-27,504 tokens for one flag set).
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict

from kvbench.sim.geometry import ModelGeometry

__all__ = [
    "GIB",
    "InsufficientKVCacheError",
    "KVCapacity",
    "blocks_for_bytes",
    "compute_capacity",
]

GIB = 1 << 30


class InsufficientKVCacheError(ValueError):
    """Raised, as vLLM does, when one max-length request does not fit in the cache."""


class KVCapacity(BaseModel):
    """Result of the capacity computation; ``lines`` are vLLM's INFO log lines."""

    model_config = ConfigDict(frozen=True)

    available_bytes: int
    page_size_bytes: int
    num_layers: int
    block_size: int
    num_gpu_blocks: int
    max_model_len: int
    kv_dtype_bytes: int

    @property
    def num_tokens(self) -> int:
        """Tokens of KV the pool holds, as the "GPU KV cache size" line counts them."""
        return self.num_gpu_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        """Max-length requests that fit at once (vLLM's "Maximum concurrency")."""
        blocks_per_request = -(-self.max_model_len // self.block_size)
        return self.num_gpu_blocks / blocks_per_request

    @property
    def lines(self) -> list[str]:
        """The three start-up lines, character for character in vLLM's format."""
        return [
            f"Available KV cache memory: {self.available_bytes / GIB:.2f} GiB",
            f"GPU KV cache size: {self.num_tokens:,} tokens",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
            f"{self.max_concurrency:.2f}x",
        ]


def blocks_for_bytes(
    geometry: ModelGeometry, available_bytes: int, *, block_size: int, kv_element_bytes: int
) -> int:
    """KV blocks that ``available_bytes`` hold: vLLM's ``available // page_size // layers``."""
    page_size = geometry.page_bytes(block_size, kv_element_bytes)
    return max(available_bytes // page_size // geometry.num_layers, 0)


def compute_capacity(
    geometry: ModelGeometry,
    *,
    block_size: int,
    max_model_len: int,
    kv_cache_dtype: str = "auto",
    dtype: str | None = None,
    kv_cache_memory_bytes: int | None = None,
    gpu_memory_bytes: int,
    gpu_memory_utilization: float,
    non_kv_overhead_bytes: int,
    jitter: float = 0.0,
    seed: int = 0,
) -> KVCapacity:
    """Blocks of KV cache for this configuration (see the module docstring for the rule).

    `dtype` is `--dtype`: an `auto` KV cache is stored in it (config.json's when unset or
    `auto`), so `--dtype float32` doubles the page size and halves the blocks."""
    elem = geometry.kv_element_bytes(kv_cache_dtype, dtype)
    page_size = geometry.page_bytes(block_size, elem)
    if kv_cache_memory_bytes is not None:
        available = int(kv_cache_memory_bytes)
    else:
        budget = gpu_memory_bytes * gpu_memory_utilization
        available = int(budget - geometry.weight_bytes - non_kv_overhead_bytes)
        if jitter > 0:
            available = int(available * (1.0 + random.Random(seed).uniform(-jitter, jitter)))
    if available <= 0:
        raise InsufficientKVCacheError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    capacity = KVCapacity(
        available_bytes=available,
        page_size_bytes=page_size,
        num_layers=geometry.num_layers,
        block_size=block_size,
        num_gpu_blocks=blocks_for_bytes(
            geometry, available, block_size=block_size, kv_element_bytes=elem
        ),
        max_model_len=max_model_len,
        kv_dtype_bytes=elem,
    )
    needed = -(-max_model_len // block_size) * page_size * geometry.num_layers
    if needed > available:
        raise InsufficientKVCacheError(
            f"To serve at least one request with the models's max seq len "
            f"({max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({available / GIB:.2f} GiB). "
            f"Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
            f"when initializing the engine."
        )
    return capacity
