"""The request hit rate an LRU prefix cache should reach on the shared-prefix workload.

Che's approximation (Che, Tung and Wang, 2002; Fricker, Robert and Roberts, 2012), counted in
KV blocks as vLLM's free queue evicts them. Each request leaves its `unique_blocks` (suffix and
output, never hit again) and touches its prefix's `prefix_blocks`; a request frees its blocks
tail first, so a prefix's first block is the last of its blocks to go, and a request hits
(`cached_tokens > 0`) while that block is cached. It is, as long as what was freed after it
fits beside it: with requests of prefix j arriving with probability q_j, prefix i's first
block survives an age up to its own characteristic time T_i,

    sum_{j != i} prefix_blocks * (1 - exp(-q_j T_i)) + unique_blocks * T_i = cache_blocks - 1

and a request hits with probability sum_i q_i (1 - exp(-q_i T_i)). Leaving prefix i out of its
own sum (the refinement for caches that hold only a few prompts) matters here: one worker of
article 002 holds about four. Under a Service every worker sees the whole stream (its 1/W
sample has the same popularities); under prefix affinity each worker sees only its own
prefixes, renormalised, and the rate is the load-weighted mean.
"""

import math
from collections.abc import Callable

from pydantic import BaseModel, Field

__all__ = ["RequestBlocks", "affinity_hit_rate", "che_hit_rate"]


class RequestBlocks(BaseModel):
    """What one request leaves in the prefix cache, in KV blocks."""

    prefix: int = Field(..., ge=0, description="Full blocks of the shared prefix")
    unique: int = Field(..., ge=0, description="Full blocks of its own (suffix and output)")

    @classmethod
    def of(cls, prefix_tokens: int, prompt_tokens: int, output_tokens: int, block_size: int):
        """vLLM caches full blocks of computed tokens: all but the last generated token."""
        computed = prompt_tokens + output_tokens - 1
        prefix = prefix_tokens // block_size
        return cls(prefix=prefix, unique=max(computed // block_size - prefix, 0))


def _solve(content: Callable[[float], float], target: float) -> float:
    """The t at which the increasing `content(t)` reaches `target` (bisection)."""
    high = 1.0
    while content(high) < target:
        high *= 2
    low = 0.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if content(mid) < target else (low, mid)
    return (low + high) / 2


def che_hit_rate(weights: list[float], blocks: RequestBlocks, cache_blocks: float) -> float:
    """Request hit rate of one LRU cache of `cache_blocks` fed prefixes with these weights."""
    total = sum(weights)
    q = [w / total for w in weights if w > 0] if total > 0 else []
    room = cache_blocks - 1  # beside the prefix's own first block
    if not q or room < 0:
        return 0.0
    s, u = blocks.prefix, blocks.unique

    def content(t: float) -> float:
        return s * sum(1.0 - math.exp(-p * t) for p in q) + u * t

    # T_i lies where content(t) minus prefix i's own part (at most s) reaches room: between
    # these two times. Without unique blocks the content is bounded by s * len(q).
    ceiling = math.inf if u > 0 else s * len(q)
    if room >= ceiling - s:  # every other prefix fits beside any one: all stay cached
        return 1.0
    low = _solve(content, room)
    high = _solve(content, min(room + s, ceiling * (1 - 1e-9)))
    grid = [low + (high - low) * k / 256 for k in range(257)]
    table = [content(t) for t in grid]
    rate = 0.0
    for p in q:
        rest = [c - s * (1.0 - math.exp(-p * t)) for c, t in zip(table, grid, strict=True)]
        k = next((k for k, c in enumerate(rest) if c >= room), len(rest) - 1)
        if k == 0:
            t_i = grid[0]
        else:  # linear between the grid points around the crossing
            share = (room - rest[k - 1]) / ((rest[k] - rest[k - 1]) or 1.0)
            t_i = grid[k - 1] + share * (grid[k] - grid[k - 1])
        rate += p * (1.0 - math.exp(-p * t_i))
    return rate


def affinity_hit_rate(
    weights: list[float], owners: dict[int, str], blocks: RequestBlocks, cache_blocks: float
) -> float:
    """Request hit rate when prefix `i` always goes to `owners[i]`: each worker's own stream."""
    total = sum(weights)
    if total <= 0:
        return 0.0
    rate = 0.0
    for worker in set(owners.values()):
        own = [weights[i] for i, owner in owners.items() if owner == worker]
        rate += sum(own) / total * che_hit_rate(own, blocks, cache_blocks)
    return rate
