"""Per-request KV block management and prefix-cache lookups (vLLM's KVCacheManager).

Rules kept from ``vllm/v1/core/kv_cache_manager.py`` and ``kv_cache_utils.py``:

- block hashes chain: ``hash_fn((parent_hash, block_token_ids, None))`` from
  ``NONE_HASH``, with vLLM's algorithms (``kvbench.sim.hashing``); only full blocks are
  hashed and cached, and a request's hashes are computed once and kept on it;
- a lookup walks the chain and stops at the first miss; the hit is capped at
  ``num_tokens - 1`` (the last token is recomputed for its logits), so it is block
  aligned and at most ``(num_tokens - 1) // block_size`` blocks;
- ``allocate_slots`` fails (returns False) when the new blocks plus hit blocks that sit
  in the free queue exceed the free blocks; on success it caches every block that the
  scheduled tokens fill, at allocation time, so a same-prefix request scheduled later
  hits even before the first one has finished its prefill;
- freeing gives blocks back tail first; prefix statistics count tokens, and lookups of
  previously preempted requests are counted apart (vLLM does not export those);
- with ``full_sequence_must_fit`` (vLLM's ``--scheduler-reserve-full-isl``, on by default)
  a waiting request is admitted only when its whole sequence fits, not just its first
  chunk;
- statistics are recorded by ``record_prefix_cache_stats``, which the scheduler calls at
  admission (vLLM since vllm-project/vllm#48860: "record the local prefix-cache query
  once, at admission"), or at every lookup of a waiting request when asked to follow vLLM
  0.25 and earlier, which counted each step a request waited for blocks again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.sim.block_pool import BlockPool
from kvbench.sim.hashing import (
    HashAlgo,
    get_hash_fn_by_name,
    hash_block_tokens,
    init_none_hash,
)
from kvbench.sim.request import SimRequest

__all__ = ["KVCacheManager", "PrefixCacheStats"]

_CHAINED_HASHES: dict[str, dict[tuple[bytes, tuple[int, ...]], bytes]] = {}
"""Chained block hashes already computed, per hash algorithm, by (parent, tokens): a pure
function of its key, shared by every cache in the process (virtual time's workers alike), so
requests that share a prefix hash it once, and a prefix is most of what the workloads hash."""
_MEMO_LIMIT = 1 << 17
"""Entries (about 350 bytes each) past which the memo starts again: a long-lived server stays
bounded."""


@dataclass
class PrefixCacheStats:
    """Cumulative token counts of prefix-cache lookups (vLLM's PrefixCacheStats)."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0


class KVCacheManager:
    """Blocks of each request, cache lookups and hit statistics."""

    def __init__(
        self,
        num_gpu_blocks: int,
        *,
        block_size: int,
        max_model_len: int,
        enable_caching: bool = True,
        hash_algo: HashAlgo = "sha256",
        record_events: bool = False,
    ) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.pool = BlockPool(
            num_gpu_blocks, enable_caching=enable_caching, record_events=record_events
        )
        self.hash_fn = get_hash_fn_by_name(hash_algo)
        self._hashes = _CHAINED_HASHES.setdefault(hash_algo, {})
        self.none_hash = init_none_hash(self.hash_fn)
        self.stats = PrefixCacheStats()

    @property
    def usage(self) -> float:
        return self.pool.usage

    def ensure_block_hashes(self, request: SimRequest, num_blocks: int) -> list[bytes]:
        """Extend the request's hash chain to cover its first ``num_blocks`` blocks."""
        hashes = request.block_hashes
        done = len(hashes)
        if done >= num_blocks:
            return hashes
        bs = self.block_size
        parent = hashes[-1] if hashes else self.none_hash
        hash_fn = self.hash_fn
        prompt = request.prompt_token_ids
        full_prompt_blocks = request.num_prompt_tokens // bs
        memo = self._hashes
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        for i in range(done, num_blocks):
            if i < full_prompt_blocks:
                tokens = tuple(prompt[i * bs : (i + 1) * bs])
            else:
                tokens = tuple(request.token_ids(i * bs, (i + 1) * bs))
            key = (parent, tokens)
            block_hash = memo.get(key)
            if block_hash is None:
                block_hash = memo[key] = hash_block_tokens(hash_fn, parent, tokens)
            parent = block_hash
            hashes.append(parent)
        return hashes

    def get_computed_blocks(self, request: SimRequest) -> tuple[list[int], int]:
        """Longest cached prefix of the request: (blocks, tokens); not recorded in stats."""
        if not self.enable_caching:
            return [], 0
        num_tokens = request.num_tokens
        max_blocks = (num_tokens - 1) // self.block_size
        hashes = self.ensure_block_hashes(request, max_blocks)
        cached = self.pool.cached
        hit: list[int] = []
        for i in range(max_blocks):
            bucket = cached.get(hashes[i])
            if not bucket:
                break
            hit.append(bucket[0])
        return hit, len(hit) * self.block_size

    def record_prefix_cache_stats(self, request: SimRequest, num_hit_tokens: int) -> None:
        """Count one admitted lookup (tokens queried and hit), apart for preempted requests."""
        if not self.enable_caching:
            return
        stats = self.stats
        if request.num_preemptions > 0:
            stats.preempted_requests += 1
            stats.preempted_queries += request.num_tokens
            stats.preempted_hits += num_hit_tokens
        else:
            stats.requests += 1
            stats.queries += request.num_tokens
            stats.hits += num_hit_tokens

    def _new_blocks(self, request: SimRequest, num_tokens: int, num_computed_blocks: int) -> int:
        """Blocks beyond the request's own and its hit blocks that ``num_tokens`` need."""
        num_required = -(-min(num_tokens, self.max_model_len) // self.block_size)
        return num_required - len(request.blocks) - num_computed_blocks

    def allocate_slots(
        self,
        request: SimRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[int] | None = None,
        full_sequence_must_fit: bool = False,
    ) -> bool:
        """Reserve blocks for ``num_new_tokens`` more tokens; False if they do not fit, or,
        with ``full_sequence_must_fit`` (the admission gate), if the whole sequence would not.
        Hit blocks that sit in the free queue count against the free blocks (vLLM's
        ``get_num_blocks_to_allocate``)."""
        pool = self.pool
        computed = new_computed_blocks or ()
        ref_cnt = pool.ref_cnt
        num_evictable = sum(1 for b in computed if ref_cnt[b] == 0) if computed else 0
        free = len(pool.free_queue) - num_evictable
        if (
            full_sequence_must_fit
            and self._new_blocks(request, request.num_tokens, len(computed)) > free
        ):
            return False
        num_computed = request.num_computed_tokens + num_new_computed_tokens
        num_new_blocks = self._new_blocks(request, num_computed + num_new_tokens, len(computed))
        if num_new_blocks > free:
            return False
        if computed:
            pool.touch(computed)
            request.blocks.extend(computed)
            request.num_cached_blocks = len(request.blocks)
        if num_new_blocks > 0:
            request.blocks.extend(pool.get_new_blocks(num_new_blocks))
        if self.enable_caching:
            known = request.num_tokens - request.num_output_placeholders
            self.cache_blocks(request, min(num_computed + num_new_tokens, known))
        return True

    def cache_blocks(self, request: SimRequest, num_tokens: int) -> None:
        """Register the request's blocks that ``num_tokens`` tokens fill."""
        bs = self.block_size
        num_full = num_tokens // bs
        start = request.num_cached_blocks
        if num_full <= start:
            return
        hashes = self.ensure_block_hashes(request, num_full)
        pool = self.pool
        blocks = request.blocks
        for i in range(start, num_full):
            pool.cache_block(blocks[i], hashes[i])
        request.num_cached_blocks = num_full
        if pool.events is not None:
            parent = hashes[start - 1] if start > 0 else None
            pool.events.append(
                (
                    "stored",
                    hashes[start:num_full],
                    parent,
                    request.token_ids(start * bs, num_full * bs),
                )
            )

    def free(self, request: SimRequest) -> None:
        """Release the request's blocks, tail first, and forget its allocation."""
        if request.blocks:
            self.pool.free_blocks(reversed(request.blocks))
        request.blocks = []
        request.num_cached_blocks = 0

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()
