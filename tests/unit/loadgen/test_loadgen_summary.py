"""The summary's pure functions: percentiles, hit rates side by side, clocks, warm-ups out."""

import numpy as np
import pytest

from kvbench.api.slo import Objectives
from kvbench.loadgen.client import Attempt
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.records import RequestRecord, SimTiming, sim_timing, to_record
from kvbench.loadgen.summary import percentile, stats, summarize_records
from kvbench.loadgen.workload import Request


def _rec(index: int, *, phase: str = "measured", ttft: float = 0.1, cached: int | None = 0,
         error: str | None = None, sim: SimTiming | None = None, prompt: int = 100,
         output: int = 4) -> RequestRecord:  # fmt: skip
    return RequestRecord(
        phase=phase, index=index, endpoint="e", due=0, start=0, end=1, ttft=ttft,
        e2e=None if error else ttft + 0.03 * (output - 1), itl=[0.03] * (output - 1),
        prompt_tokens=prompt, output_tokens=output, cached_tokens=cached,
        error_kind=error, sim=sim,
    )  # fmt: skip


def test_percentile_matches_numpy() -> None:
    values = sorted(np.random.default_rng(0).exponential(size=101).tolist())
    for q in (0, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert stats([]).count == 0 and stats([]).p50 is None
    assert stats([2.0]).p99 == 2.0


def test_warmups_are_left_out_and_errors_counted() -> None:
    records = [
        _rec(0, phase="warmup", ttft=9.0, cached=50),
        _rec(0, ttft=0.1, cached=80),
        _rec(1, ttft=0.3, cached=0),
        _rec(2, error="timeout", cached=None),
        _rec(3, error="http", cached=None),
    ]
    s = summarize_records(records, None, window_seconds=2.0)
    assert (s.requests, s.succeeded, s.errors) == (4, 2, 2)
    assert s.errors_by_kind == {"http": 1, "timeout": 1}
    assert s.wall.ttft.max == 0.3 and s.wall.ttft.count == 2
    assert s.wall.ttft_hit.p50 == 0.1 and s.wall.ttft_miss.p50 == 0.3
    assert s.wall.requests_per_second == 1.0 and s.wall.output_tokens_per_second == 4.0
    assert s.hit_rates.request_hit_rate == 0.5
    assert s.hit_rates.token_hit_rate_responses == pytest.approx(80 / 200)
    assert s.hit_rates.token_hit_rate_counters is None and s.hit_rates.agree is None
    assert s.wall.itl.count == 6 and s.wall.tpot.p50 == pytest.approx(0.03)
    assert s.latency_clock == "wall" and s.simulated is None


def test_the_two_hit_rates_side_by_side() -> None:
    records = [_rec(0, cached=2032, prompt=2371), _rec(1, cached=0, prompt=2371)]
    agree = [PodDelta(pod="a", prefix_cache_queries=4742, prefix_cache_hits=2032)]
    s = summarize_records(records, agree, 1.0)
    assert s.hit_rates.token_hit_rate_counters == s.hit_rates.token_hit_rate_responses
    assert s.hit_rates.agree is True
    # a preempted request queries the cache twice: the counters disagree, a finding
    preempted = [PodDelta(pod="a", prefix_cache_queries=7113, prefix_cache_hits=2032)]
    assert summarize_records(records, preempted, 1.0).hit_rates.agree is False


def test_the_servers_own_ttft_is_pooled_over_every_first_token() -> None:
    """Two pods: one served 30 first tokens at 20 ms, one 10 at 60 ms. The mean over the
    window's first tokens is 30 ms, not the 40 ms of the pods' means averaged; a pod without
    the histogram leaves no mean at all rather than one of some pods only."""
    records = [_rec(i, ttft=0.05) for i in range(4)]
    pods = [PodDelta(pod="a", ttft_seconds=0.6, ttft_count=30),
            PodDelta(pod="b", ttft_seconds=0.6, ttft_count=10)]  # fmt: skip
    assert summarize_records(records, pods, 1.0).server_ttft_mean == pytest.approx(0.03)
    idle = [*pods, PodDelta(pod="c", ttft_seconds=0.0, ttft_count=0)]
    assert summarize_records(records, idle, 1.0).server_ttft_mean == pytest.approx(0.03)
    unmeasured = [*pods, PodDelta(pod="d")]
    assert summarize_records(records, unmeasured, 1.0).server_ttft_mean is None
    assert summarize_records(records, None, 1.0).server_ttft_mean is None


def test_simulated_clock_when_every_response_has_it() -> None:
    sims = [SimTiming(worker="w", arrival=10.0 + i, ttft=0.04 + i / 100, e2e=1.0,
                      itl=[0.01, 0.02]) for i in range(3)]  # fmt: skip
    records = [_rec(i, sim=sims[i], output=3) for i in range(3)]
    s = summarize_records(records, None, window_seconds=0.1, time_scale=0.05)
    assert s.latency_clock == "simulated" and s.simulated is not None
    assert s.simulated.window_seconds == pytest.approx(2.0)
    assert s.simulated.ttft.p50 == pytest.approx(0.05) and s.simulated.itl.max == 0.02
    # time scale 0 (never wait): the longest span one worker's clock covered
    assert summarize_records(records, None, 0.1, time_scale=0).simulated.window_seconds == 3.0
    assert s.reported is s.simulated and s.reported.ttft.p50 != s.wall.ttft.p50
    mixed = summarize_records([*records, _rec(9)], None, 0.1, 0.05)
    assert mixed.latency_clock == "wall" and mixed.reported is mixed.wall


def test_the_simulated_clock_keeps_the_wall_time_outside_the_server() -> None:
    """A router in front of the simulator, at time scale 1: the client waited 45 ms for a
    first token the server made in 34, and those 11 ms happen on the hardware too. Slowed
    down 2x, the server's share of the wall TTFT is twice its simulated TTFT. Sped up 20x,
    the time outside is this machine's, at 20x the hardware's request rate: left out."""

    def rec(i: int, wall: float, sim_ttft: float, scale: float | None) -> RequestRecord:
        sim = SimTiming(worker="w", arrival=float(i), ttft=sim_ttft, e2e=sim_ttft + 0.02,
                        itl=[0.01, 0.01], time_scale=scale)  # fmt: skip
        return _rec(i, ttft=wall, output=3, sim=sim)

    real_time = summarize_records([rec(i, 0.045, 0.034, 1.0) for i in range(3)], None, 1.0, 1.0)
    assert real_time.simulated.ttft.p50 == pytest.approx(0.045)
    assert real_time.simulated.e2e.p50 == pytest.approx(0.054 + 0.011)
    assert real_time.simulated.itl.max == 0.01
    assert real_time.outside_server.p50 == pytest.approx(0.011)
    slowed = summarize_records([rec(i, 0.079, 0.034, 2.0) for i in range(3)], None, 1.0, 2.0)
    assert slowed.simulated.ttft.p50 == pytest.approx(0.034 + 0.011)
    sped_up = summarize_records([rec(i, 0.0127, 0.034, 0.05) for i in range(3)], None, 1.0, 0.05)
    assert sped_up.simulated.ttft.p50 == 0.034 and sped_up.outside_server is None
    # a wall TTFT below the server's share (timer jitter) adds nothing; virtual time none
    early = summarize_records([rec(0, 0.030, 0.034, 1.0)], None, 1.0, 1.0)
    assert early.simulated.ttft.p50 == pytest.approx(0.034)
    virtual = summarize_records([rec(0, 0.034, 0.034, None)], None, 1.0, 0)
    assert virtual.simulated.ttft.p50 == 0.034 and virtual.outside_server is None


def test_sim_timing_with_and_without_the_first_token() -> None:
    ext = {"worker": "w", "arrival_time": 1.0, "first_scheduled_time": 1.5,
           "first_token_time": 2.0, "token_times": [2.0, 2.5, 3.5], "finish_time": 3.5,
           "num_preemptions": 1, "cached_tokens": 32, "time_scale": 0.05}  # fmt: skip
    t = sim_timing(ext)
    assert (t.ttft, t.e2e, t.queue, t.itl) == (1.0, 2.5, 0.5, [0.5, 1.0])
    assert (t.preemptions, t.cached_tokens, t.time_scale, t.worker) == (1, 32, 0.05, "w")
    assert sim_timing({**ext, "token_times": [2.5, 3.5]}).itl == [0.5, 1.0]


def test_to_record_counts_chunks_when_usage_is_missing() -> None:
    attempt = Attempt(Request("measured", 0, (1,), 1, 3), "e", due=10.0)
    attempt.start, attempt.end = 10.5, 11.0
    attempt.token_times = [10.6, 10.7, 10.9]
    record = to_record(attempt, origin=10.0)
    assert record.output_tokens == 3 and record.cached_tokens is None
    assert record.ttft == pytest.approx(0.1) and record.itl == pytest.approx([0.1, 0.2])
    assert (record.due, record.start) == (0.0, 0.5)


def test_a_missing_cached_tokens_is_a_miss_once_the_server_reports_them() -> None:
    """Some vLLM releases leave prompt_tokens_details out when nothing was cached."""
    records = [_rec(0, cached=64, ttft=0.01), _rec(1, cached=None, ttft=0.2)]
    s = summarize_records(records, None, 1.0)
    assert s.hit_rates.request_hit_rate == 0.5 and s.hit_rates.reported == 1
    assert s.hit_rates.token_hit_rate_responses == pytest.approx(64 / 200)
    assert s.wall.ttft_miss.p50 == 0.2 and s.wall.ttft_hit.p50 == 0.01
    silent = summarize_records([_rec(0, cached=None), _rec(1, cached=None)], None, 1.0)
    assert silent.hit_rates.request_hit_rate is None and silent.wall.ttft_miss.count == 0


def test_goodput_counts_requests_that_meet_every_objective() -> None:
    """TTFT 0.1 / 0.3 s against 200 ms, e2e against 250 ms; a failed request meets nothing
    and stays in the denominator; a one-token answer has no TPOT or gap to miss."""
    objectives = Objectives(ttft="200ms", tpot="40ms", e2e="250ms")
    records = [
        _rec(0, ttft=0.1),  # e2e 0.19: meets all
        _rec(1, ttft=0.3),  # misses TTFT and e2e (0.39)
        _rec(2, ttft=0.15, output=5),  # e2e 0.27: misses e2e only
        _rec(3, ttft=0.05, output=1),  # no TPOT: meets all
        _rec(4, error="timeout", cached=None),
        _rec(5, phase="warmup", ttft=9.0),
    ]
    s = summarize_records(records, None, window_seconds=2.0, objectives=objectives)
    assert s.goodput is not None
    assert s.goodput.objectives == {"ttft": 0.2, "tpot": 0.04, "e2e": 0.25}
    assert s.goodput.good == 2 and s.goodput.attainment == pytest.approx(2 / 5)
    assert s.goodput.requests_per_second == pytest.approx(1.0)
    assert s.goodput.met == pytest.approx({"ttft": 3 / 5, "tpot": 4 / 5, "e2e": 2 / 5})
    assert summarize_records(records, None, window_seconds=2.0).goodput is None


def test_goodput_is_judged_on_the_reported_clock() -> None:
    """Under the simulator the wall clock is mostly the client's: the objectives apply to the
    simulator's own timings, and the window is the simulated one."""
    objectives = Objectives(ttft="100ms", itl="20ms")
    sims = [SimTiming(worker="w", arrival=0.0, ttft=0.05, e2e=0.11, itl=[0.03, 0.03]),
            SimTiming(worker="w", arrival=1.0, ttft=0.05, e2e=0.09, itl=[0.02, 0.02])]  # fmt: skip
    records = [_rec(i, ttft=0.5, output=3, sim=sim) for i, sim in enumerate(sims)]
    s = summarize_records(records, None, 1.0, time_scale=0.5, objectives=objectives)
    assert s.latency_clock == "simulated" and s.goodput is not None
    assert s.goodput.met == {"ttft": 1.0, "itl": 0.5} and s.goodput.good == 1
    assert s.goodput.requests_per_second == pytest.approx(1 / 2.0)  # 1 s wall = 2 s simulated
