"""How many KV blocks a mocker needs to hold what a `kvbench sim` worker holds.

`kvbench sim --kv-cache-memory-bytes M` sizes its cache the way vLLM v1 does:
`num_blocks = M // page_size // layers` with `page_size = 2 * block_size * kv_heads *
head_dim * dtype_bytes` (K and V of one block in one layer). `dynamo.mocker` takes the
block count itself (`--num-gpu-blocks-override`), so the same KV capacity is that count:
1 GiB on Qwen3-0.6B (28 layers, 8 KV heads, head_dim 128, bfloat16) at 16 tokens a block
is 585 blocks (9,360 tokens).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["QWEN3_0_6B", "KVGeometry", "mocker_blocks_for_bytes"]


class KVGeometry(BaseModel):
    """The model dimensions that set the size of one KV block."""

    model_config = ConfigDict(frozen=True)

    num_layers: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype_bytes: int = Field(2, ge=1)

    def page_bytes(self, block_size: int) -> int:
        """Bytes of K and V for one block in one layer (vLLM's page size)."""
        return 2 * block_size * self.num_kv_heads * self.head_dim * self.dtype_bytes


QWEN3_0_6B = KVGeometry(num_layers=28, num_kv_heads=8, head_dim=128, dtype_bytes=2)


def mocker_blocks_for_bytes(
    kv_cache_memory_bytes: int, block_size: int = 16, geometry: KVGeometry = QWEN3_0_6B
) -> int:
    """`--num-gpu-blocks-override` equal to a vLLM cache of `kv_cache_memory_bytes`."""
    if kv_cache_memory_bytes <= 0:
        raise ValueError("kv_cache_memory_bytes must be positive")
    return kv_cache_memory_bytes // geometry.page_bytes(block_size) // geometry.num_layers
