"""The pool of KV blocks: reference counts, the free queue, and the prefix-cache map.

Follows ``vllm/v1/core/block_pool.py`` and ``FreeKVCacheBlockQueue``:

- block 0 is the null block and is never handed out; usage is
  ``1 - free / (num_gpu_blocks - 1)``;
- allocation pops from the front of the free queue and evicts the popped block's
  hash from the cache (lazy eviction), so the front holds the least recently used;
- freed blocks that carry a hash are appended to the back in the order given (callers
  pass a request's blocks reversed, so the tail of a chain is evicted first); freed
  blocks without a hash go to the front, as they can never be hit;
- a hit on a free block removes it from the queue (``touch``); identical blocks are not
  de-duplicated, a lookup returns the first one cached.

Blocks are plain ints and the free queue is an ``OrderedDict`` (O(1) pop-front,
remove and both-end insert), which keeps a step cheap in Python.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

__all__ = ["BlockPool", "KVEvent"]

KVEvent = tuple
"""``("stored", hashes, parent_hash, token_ids)``, ``("removed", hashes)`` or ``("cleared",)``."""


class BlockPool:
    """Allocation, freeing and caching of KV blocks."""

    def __init__(
        self, num_gpu_blocks: int, *, enable_caching: bool, record_events: bool = False
    ) -> None:
        if num_gpu_blocks < 2:
            raise ValueError("the pool needs at least one block besides the null block")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_gpu_blocks
        self.block_hash: list[bytes | None] = [None] * num_gpu_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        self.cached: dict[bytes, list[int]] = {}
        self.events: list[KVEvent] | None = [] if record_events else None

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """KV cache usage in [0, 1] as ``vllm:kv_cache_usage_perc`` reports it."""
        return 1.0 - len(self.free_queue) / (self.num_gpu_blocks - 1)

    def cache_block(self, block: int, block_hash: bytes) -> None:
        """Register a full block under its hash so later requests can hit it."""
        self.block_hash[block] = block_hash
        bucket = self.cached.get(block_hash)
        if bucket is None:
            self.cached[block_hash] = [block]
        else:
            bucket.append(block)

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop blocks from the front of the free queue, evicting their cached hashes."""
        if num_blocks > len(self.free_queue):
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        popitem = self.free_queue.popitem
        ref_cnt, block_hash = self.ref_cnt, self.block_hash
        out = []
        for _ in range(num_blocks):
            block = popitem(last=False)[0]
            if block_hash[block] is not None:
                self._evict(block)
            ref_cnt[block] = 1
            out.append(block)
        return out

    def _evict(self, block: int) -> None:
        h = self.block_hash[block]
        self.block_hash[block] = None
        bucket = self.cached.get(h)  # type: ignore[arg-type]
        if bucket is None or block not in bucket:
            return
        bucket.remove(block)
        if not bucket:
            del self.cached[h]  # type: ignore[arg-type]
        if self.events is not None:
            self.events.append(("removed", [h]))

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on hit blocks, pulling free ones out of the queue."""
        ref_cnt, free_queue = self.ref_cnt, self.free_queue
        for block in blocks:
            if ref_cnt[block] == 0:
                del free_queue[block]
            ref_cnt[block] += 1

    def free_blocks(self, ordered_blocks: Iterable[int]) -> None:
        """Drop one reference on each block; the first given is evicted first."""
        ref_cnt, block_hash, free_queue = self.ref_cnt, self.block_hash, self.free_queue
        fresh: list[int] = []
        for block in ordered_blocks:
            ref_cnt[block] -= 1
            if ref_cnt[block] == 0:
                if block_hash[block] is None:
                    fresh.append(block)
                else:
                    free_queue[block] = None
        for block in reversed(fresh):
            free_queue[block] = None
            free_queue.move_to_end(block, last=False)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash; refused (False) while any block is in use, as in vLLM."""
        if len(self.free_queue) != self.num_gpu_blocks - 1:
            return False
        self.cached.clear()
        self.block_hash = [None] * self.num_gpu_blocks
        if self.events is not None:
            self.events.append(("cleared",))
        return True

    def take_events(self) -> list[KVEvent]:
        """Events since the last call, oldest first."""
        if not self.events:
            return []
        events, self.events = self.events, []
        return events

    def free_order(self) -> list[int]:
        """The free queue front to back (eviction order); for tests and debugging."""
        return list(self.free_queue)
