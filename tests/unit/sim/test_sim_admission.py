"""vLLM's admission rules under KV pressure: the full-prompt gate
(`--scheduler-reserve-full-isl`, on by default), the cached tokens a request preempted before
its first token reports, and when prefix-cache lookups are counted (at admission, or at every
lookup as vLLM 0.25 did). Measured on real vLLM 0.25 (shared/reference/real-vllm-0.25-h200.md).

The scenario: 10 usable blocks of 4 tokens, a 16-token budget per step, two 24-token prompts
(6 blocks each). `a` is admitted first; `b` would fit its first chunk beside `a` but not its
whole prompt.
"""

import pytest

from kvbench.sim.args import parse_sim_args
from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import SimRequest
from kvbench.sim.scheduler import Scheduler


def _run(gate: bool, at_lookup: bool = False) -> tuple[Scheduler, list[SimRequest], list]:
    kv = KVCacheManager(11, block_size=4, max_model_len=64)
    admissions: list[tuple[SimRequest, int]] = []
    record = kv.record_prefix_cache_stats

    def logged(request: SimRequest, num_hit: int) -> None:
        admissions.append((request, num_hit))
        record(request, num_hit)

    kv.record_prefix_cache_stats = logged  # type: ignore[method-assign]
    s = Scheduler(
        kv, max_num_seqs=8, max_num_batched_tokens=16, max_model_len=64,
        reserve_full_isl=gate, stats_at_lookup=at_lookup,
    )  # fmt: skip
    requests = [
        SimRequest("a", list(range(0, 24)), 8, arrival_time=0.0),
        SimRequest("b", list(range(500, 524)), 8, arrival_time=0.0),
    ]
    for r in requests:
        s.add_request(r)
    for step in range(200):
        if not s.has_work:
            break
        s.update_from_output(s.schedule(float(step)), step + 1.0)
    assert all(r.num_output_tokens == 8 for r in requests), "both complete"
    return s, requests, admissions


def test_without_the_gate_a_first_chunk_that_fits_is_admitted_and_later_preempted() -> None:
    s, _, _ = _run(gate=False)
    assert s.num_preemptions >= 1


def test_the_gate_admits_only_a_whole_prompt_that_fits_so_nothing_is_preempted() -> None:
    s, (a, b), _ = _run(gate=True)
    assert s.num_preemptions == 0
    assert b.first_scheduled_time is not None and a.finish_time is not None
    assert b.first_scheduled_time >= a.finish_time - 1.0, "b waited for a's blocks"


def test_a_request_preempted_before_its_first_token_reports_its_readmissions_hit() -> None:
    _, (_, b), admissions = _run(gate=False)
    assert b.num_preemptions >= 1 and b.first_token_time is not None
    hits = [hit for request, hit in admissions if request is b]
    assert len(hits) >= 2 and hits[0] == 0 and hits[-1] > 0, hits
    assert b.num_cached_tokens == hits[-1], "vLLM re-sets prefill stats until the first token"


def test_lookups_count_once_at_admission_by_default() -> None:
    s, _, _ = _run(gate=True)
    stats = s.kv.stats
    assert stats.requests == 2 and stats.queries == 48


def test_vllm_025_counting_records_every_lookup_of_a_waiting_request() -> None:
    s, requests, admissions = _run(gate=True, at_lookup=True)
    stats = s.kv.stats
    looked_up_b = sum(1 for request, _ in admissions if request is requests[1])
    assert looked_up_b > 1, "b was looked up while it waited for blocks"
    assert stats.requests == 1 + looked_up_b and stats.queries == 24 * stats.requests


@pytest.mark.parametrize(
    ("argv", "gate", "at"),
    [
        ([], True, "admission"),
        (["--no-scheduler-reserve-full-isl"], False, "admission"),
        (["--prefix-cache-stats-at", "lookup"], True, "lookup"),
    ],
)
def test_the_flags_default_to_vllms_defaults(argv: list[str], gate: bool, at: str) -> None:
    config, ignored = parse_sim_args(argv)
    assert (config.scheduler_reserve_full_isl, config.prefix_cache_stats_at) == (gate, at)
    assert ignored == []
