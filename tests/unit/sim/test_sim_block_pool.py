"""Block pool and KV manager against vLLM's rules, on hand-built sequences."""

import pytest

from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import SimRequest


def _kv(num_blocks=11, block_size=4, **kw):
    return KVCacheManager(num_blocks, block_size=block_size, max_model_len=1024, **kw)


def _req(name, tokens, max_tokens=4):
    return SimRequest(name, list(tokens), max_tokens, arrival_time=0.0)


def _prefill(kv, request):
    blocks, hit = kv.get_computed_blocks(request)
    assert kv.allocate_slots(request, request.num_tokens - hit, hit, blocks)
    kv.record_prefix_cache_stats(request, hit)
    request.num_computed_tokens = request.num_tokens
    return hit


def test_eviction_order_lru_and_tail_of_chain_first():
    kv = _kv()
    pool = kv.pool
    a = _req("a", range(100, 112))  # three full blocks
    _prefill(kv, a)
    assert a.blocks == [1, 2, 3]
    kv.free(a)
    # Never-used blocks first, then A's chain tail first.
    assert pool.free_order() == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]

    b = _req("b", range(200, 208))  # two full blocks, popped from the front
    _prefill(kv, b)
    assert b.blocks == [4, 5]
    kv.free(b)
    assert pool.free_order() == [6, 7, 8, 9, 10, 3, 2, 1, 5, 4]

    c = _req("c", range(300, 324))  # six blocks: five unused, then evicts A's tail
    _prefill(kv, c)
    assert c.blocks == [6, 7, 8, 9, 10, 3]
    a_again = _req("a2", range(100, 112))
    blocks, hit = kv.get_computed_blocks(a_again)
    assert (blocks, hit) == ([1, 2], 8)  # A's head survives; its tail was evicted


def test_removed_event_names_the_evicted_hash():
    kv = _kv(record_events=True)
    a = _req("a", range(100, 108))
    _prefill(kv, a)
    stored = kv.pool.take_events()
    assert stored[0][0] == "stored" and len(stored[0][1]) == 2 and stored[0][2] is None
    kv.free(a)
    filler = _req("f", range(500, 540))  # ten blocks: every free block
    _prefill(kv, filler)
    removed = [e for e in kv.pool.take_events() if e[0] == "removed"]
    assert [e[1][0] for e in removed] == [a.block_hashes[1], a.block_hashes[0]]


def test_hit_is_capped_at_prompt_length_minus_one():
    kv = _kv(num_blocks=20, block_size=16)
    _prefill(kv, _req("a", range(32)))
    exact = _req("b", range(32))
    assert kv.get_computed_blocks(exact)[1] == 16  # 31 tokens cap -> one block
    longer = _req("c", [*list(range(32)), 999])
    assert kv.get_computed_blocks(longer)[1] == 32


def test_blocks_join_the_cache_at_allocation_before_the_prefill_finishes():
    kv = _kv(num_blocks=40, block_size=16)
    first = _req("a", range(64))
    blocks, hit = kv.get_computed_blocks(first)
    assert kv.allocate_slots(first, 16, hit, blocks)  # only the first chunk scheduled
    second = _req("b", [*list(range(64)), 7])
    assert kv.get_computed_blocks(second)[1] == 16


def test_shared_blocks_are_reference_counted():
    kv = _kv(num_blocks=20, block_size=16)
    a = _req("a", [*list(range(16)), 1])
    _prefill(kv, a)
    b = _req("b", [*list(range(16)), 2])
    assert _prefill(kv, b) == 16
    shared = a.blocks[0]
    assert kv.pool.ref_cnt[shared] == 2
    kv.free(a)
    assert shared not in kv.pool.free_queue
    kv.free(b)
    assert shared in kv.pool.free_queue


def test_unhashed_partial_blocks_are_reused_first():
    kv = _kv()
    a = _req("a", range(6))  # one full block + one partial
    _prefill(kv, a)
    full, partial = a.blocks
    kv.free(a)
    order = kv.pool.free_order()
    assert order[0] == partial and order[-1] == full


def test_generated_tokens_are_cached_once_a_block_fills():
    kv = _kv(num_blocks=20)
    a = _req("a", range(6), max_tokens=10)
    _prefill(kv, a)
    assert a.num_cached_blocks == 1
    for _ in range(3):  # sample tokens 7..9, computing each in the following step
        a.num_output_tokens += 1
        assert kv.allocate_slots(a, 1)
        a.num_computed_tokens += 1
    assert a.num_cached_blocks == 2
    again = _req("b", a.token_ids(0, 9))
    assert kv.get_computed_blocks(again)[1] == 8


def test_stats_count_tokens_and_keep_preempted_lookups_apart():
    kv = _kv(num_blocks=20, block_size=16)
    _prefill(kv, _req("a", range(20)))
    _prefill(kv, _req("b", range(20)))
    c = _req("c", range(20))
    c.num_preemptions = 1
    _, hit = kv.get_computed_blocks(c)
    kv.record_prefix_cache_stats(c, hit)
    s = kv.stats
    assert (s.requests, s.queries, s.hits) == (2, 40, 16)
    assert (s.preempted_requests, s.preempted_queries, s.preempted_hits) == (1, 20, 16)


def test_lookups_count_only_when_admitted():
    """A request that waits for blocks is looked up every step but counted once (vLLM
    records at admission), so counters agree with the responses' cached tokens."""
    kv = _kv(num_blocks=4, block_size=16)
    holder = _req("a", range(48))
    _prefill(kv, holder)
    waiting = _req("b", range(100, 148))
    for _ in range(5):
        blocks, hit = kv.get_computed_blocks(waiting)
        assert not kv.allocate_slots(waiting, waiting.num_tokens - hit, hit, blocks)
    assert (kv.stats.requests, kv.stats.queries) == (1, 48)
    kv.free(holder)
    assert _prefill(kv, waiting) == 0
    assert (kv.stats.requests, kv.stats.queries) == (2, 96)


def test_usage_and_reset_prefix_cache():
    kv = _kv(record_events=True)
    a = _req("a", range(8))
    _prefill(kv, a)
    assert kv.usage == pytest.approx(0.2)  # 2 of the 10 usable blocks (block 0 is the null block)
    assert not kv.reset_prefix_cache()
    kv.free(a)
    kv.pool.take_events()
    assert kv.reset_prefix_cache()
    assert kv.pool.take_events() == [("cleared",)]
    assert kv.get_computed_blocks(_req("b", range(9)))[1] == 0


def test_caching_disabled_never_hits():
    kv = _kv(enable_caching=False)
    _prefill(kv, _req("a", range(12)))
    assert kv.get_computed_blocks(_req("b", range(13))) == ([], 0)
