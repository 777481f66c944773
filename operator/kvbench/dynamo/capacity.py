"""How many KV blocks a mocker needs to hold what a `kvbench sim` worker holds.

`dynamo.mocker` takes its cache as a block count (`--num-gpu-blocks-override`), while vLLM and
`kvbench sim` take bytes (`--kv-cache-memory-bytes`) and divide them by the model's page size.
The count here comes from the simulator's own geometry and rule (`kvbench.sim.geometry`,
`kvbench.sim.capacity`), so the two arms of one experiment cannot drift apart: 1 GiB on
Qwen3-0.6B at 16 tokens a block is 585 blocks in bfloat16 and 1,170 with an fp8 KV cache.
"""

from __future__ import annotations

from kvbench.sim.capacity import blocks_for_bytes
from kvbench.sim.geometry import resolve_geometry

__all__ = ["mocker_kv_blocks"]


def mocker_kv_blocks(
    model: str,
    kv_cache_memory_bytes: int,
    block_size: int = 16,
    kv_cache_dtype: str | None = None,
    dtype: str | None = None,
) -> int:
    """`--num-gpu-blocks-override` for a worker of `model` given vLLM's engine flags.

    `model` is what `--model` names (a known model or a directory with a config.json);
    `kv_cache_dtype` and `dtype` are `--kv-cache-dtype` and `--dtype`, None meaning unset.
    """
    if kv_cache_memory_bytes <= 0:
        raise ValueError("kv_cache_memory_bytes must be positive")
    geometry = resolve_geometry(model)
    element = geometry.kv_element_bytes(kv_cache_dtype or "auto", dtype)
    return blocks_for_bytes(
        geometry, kv_cache_memory_bytes, block_size=block_size, kv_element_bytes=element
    )
