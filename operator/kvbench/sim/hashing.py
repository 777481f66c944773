"""vLLM's prefix-cache block hashes, so the hashes in KV events are the ones vLLM would send.

From ``vllm/utils/hashing.py`` and ``vllm/v1/core/kv_cache_utils.py``:

- ``--prefix-caching-hash-algo``: ``sha256`` (the default) hashes
  ``pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)``; ``sha256_cbor`` hashes
  canonical CBOR, which any language can reproduce (``kvbench.sim.cbor``). vLLM's
  ``xxhash`` variants need the optional xxhash package and are not offered here.
- a block's hash is ``hash_fn((parent_hash, tuple(block_token_ids), extra_keys))``,
  the first block's parent being ``NONE_HASH = hash_fn(seed)``; the seed is
  ``PYTHONHASHSEED`` when set, else the fixed ``"vllm-none-hash"`` (vLLM's default for
  cryptographic algorithms), so equal prefixes hash equally on every worker.
- events carry ``ExternalBlockHash``: the low 64 bits of the digest as an unsigned int
  (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default) or the 32 digest bytes
  (``=0``).

The simulator has no LoRA, multimodal inputs or cache salt, so ``extra_keys`` is None.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from kvbench.sim.cbor import dumps_canonical

__all__ = [
    "DEFAULT_NONE_HASH_SEED",
    "BlockHash",
    "ExternalBlockHash",
    "HashAlgo",
    "get_hash_fn_by_name",
    "hash_block_tokens",
    "init_none_hash",
    "maybe_convert_block_hash",
    "sha256",
    "sha256_cbor",
    "use_int_block_hashes",
]

HashAlgo = Literal["sha256", "sha256_cbor"]
BlockHash = bytes
ExternalBlockHash = bytes | int
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
_MASK64 = (1 << 64) - 1


def sha256(value: Any) -> bytes:
    """vLLM's ``sha256``: SHA-256 of the highest-protocol pickle."""
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(value: Any) -> bytes:
    """vLLM's ``sha256_cbor``: SHA-256 of canonical CBOR."""
    return hashlib.sha256(dumps_canonical(value)).digest()


_HASH_FNS: dict[str, Callable[[Any], bytes]] = {"sha256": sha256, "sha256_cbor": sha256_cbor}


def get_hash_fn_by_name(name: str) -> Callable[[Any], bytes]:
    """The hash function of ``--prefix-caching-hash-algo``."""
    try:
        return _HASH_FNS[name]
    except KeyError:
        raise ValueError(f"Unsupported hash function: {name}") from None


def init_none_hash(hash_fn: Callable[[Any], bytes], env: Mapping[str, str] = os.environ) -> bytes:
    """The parent hash of every chain's first block (vLLM's ``NONE_HASH``)."""
    return hash_fn(env.get("PYTHONHASHSEED", DEFAULT_NONE_HASH_SEED))


def hash_block_tokens(
    hash_fn: Callable[[Any], bytes], parent_block_hash: BlockHash, token_ids: Sequence[int]
) -> BlockHash:
    """Hash of one full block chained to its parent (``extra_keys`` is always None here)."""
    return hash_fn((parent_block_hash, tuple(token_ids), None))


def use_int_block_hashes(env: Mapping[str, str] = os.environ) -> bool:
    """vLLM's ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` (default on)."""
    return bool(int(env.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")))


def maybe_convert_block_hash(block_hash: BlockHash, as_int: bool) -> ExternalBlockHash:
    """What a KV event carries for a block: the low 64 bits as an int, or the digest."""
    if not as_int:
        return block_hash
    return int.from_bytes(block_hash, "big") & _MASK64
