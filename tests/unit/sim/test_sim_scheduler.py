"""The FCFS scheduler: token budget, chunked prefill, max-num-seqs, preemption by recompute."""

from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import FinishReason, RequestStatus, SimRequest
from kvbench.sim.scheduler import Scheduler


def _sched(num_blocks=200, budget=64, seqs=8, block_size=16, max_model_len=2048):
    kv = KVCacheManager(num_blocks, block_size=block_size, max_model_len=max_model_len)
    return Scheduler(
        kv, max_num_seqs=seqs, max_num_batched_tokens=budget, max_model_len=max_model_len
    )


def _req(name, n, max_tokens=4, base=0):
    return SimRequest(name, list(range(base, base + n)), max_tokens, arrival_time=0.0)


def _step(s, now=0.0):
    batch = s.schedule(now)
    produced, finished = s.update_from_output(batch, now + 1.0)
    return batch, produced, finished


def test_long_prompt_is_prefilled_in_budget_sized_chunks():
    s = _sched(budget=64)
    r = _req("a", 150, base=1000)
    s.add_request(r)
    chunks = []
    while not r.token_times:
        batch, _, _ = _step(s)
        chunks.append(batch.tokens[0])
    assert chunks == [64, 64, 22]
    assert r.num_output_tokens == 1


def test_decodes_go_first_and_prefill_takes_the_rest_of_the_budget():
    s = _sched(budget=64)
    a = _req("a", 10, max_tokens=50, base=100)
    s.add_request(a)
    _step(s)  # a prefilled, first token sampled
    b = _req("b", 200, base=5000)
    s.add_request(b)
    batch, _, _ = _step(s)
    assert batch.requests == [a, b]
    assert batch.tokens == [1, 63]


def test_max_num_seqs_caps_running_requests_and_keeps_fcfs_order():
    s = _sched(budget=1000, seqs=2)
    reqs = [_req(f"r{i}", 20, base=100 * i) for i in range(4)]
    for r in reqs:
        s.add_request(r)
    batch, _, _ = _step(s)
    assert batch.requests == reqs[:2]
    assert list(s.waiting) == reqs[2:]


def test_requests_finish_at_max_tokens_and_free_their_blocks():
    s = _sched(budget=1000)
    r = _req("a", 20, max_tokens=3)
    s.add_request(r)
    for _ in range(3):
        _, _, finished = _step(s)
    assert finished == [r]
    assert r.finish_reason is FinishReason.LENGTH
    assert r.num_output_tokens == 3 and len(r.token_times) == 3
    assert s.kv.pool.num_free_blocks == 199


def test_preemption_takes_the_newest_running_request_back_to_the_queue_front():
    # 10 usable blocks of 4 tokens: two 16-token prompts take 8; their decodes run out.
    s = _sched(num_blocks=11, block_size=4, budget=100, max_model_len=64)
    old = _req("old", 16, max_tokens=20, base=0)
    new = _req("new", 16, max_tokens=20, base=500)
    s.add_request(old)
    s.add_request(new)
    _step(s)
    late = _req("late", 16, max_tokens=2, base=900)  # needs 4 blocks, only 2 are free
    s.add_request(late)
    preempted = 0
    for _ in range(30):
        batch, _, _ = _step(s)
        preempted += batch.num_preempted
        if preempted:
            break
    assert preempted == 1
    assert new.status is RequestStatus.PREEMPTED and new.num_computed_tokens == 0
    assert list(s.waiting) == [new, late]
    assert old.status is RequestStatus.RUNNING
    assert s.num_preemptions == 1


def test_preempted_request_recomputes_and_still_completes():
    s = _sched(num_blocks=11, block_size=4, budget=100, max_model_len=64)
    a = _req("a", 16, max_tokens=12, base=0)
    b = _req("b", 16, max_tokens=12, base=500)
    s.add_request(a)
    s.add_request(b)
    for i in range(200):
        if not s.has_work:
            break
        _step(s, float(i))
    assert a.num_output_tokens == b.num_output_tokens == 12
    assert b.num_preemptions >= 1
    assert s.kv.pool.num_free_blocks == 10
