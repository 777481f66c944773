"""The replay summary's percentiles are the load generator's (linear interpolation), so a p99
from a virtual-time replay and one from a measured run mean the same thing."""

import pytest

from kvbench.loadgen.summary import stats
from kvbench.sim.replay import summarize_replay
from kvbench.sim.request import SimRequest


def _finished(index: int, token_times: list[float]) -> SimRequest:
    request = SimRequest(f"req-{index}", [1, 2, 3], len(token_times), arrival_time=0.0)
    request.token_times = list(token_times)
    request.num_output_tokens = len(token_times)
    request.finish_time = token_times[-1]
    return request


def test_percentiles_interpolate_between_ranks():
    """TTFTs 0..10 s: p99 sits 90% of the way from the 10th to the 11th value (9.9 s); the
    nearest-rank rule the replay had before gave 10 s, the largest value."""
    requests = [_finished(i, [float(i), i + 1.0, i + 3.0]) for i in range(11)]
    summary = summarize_replay(requests)
    assert summary.median_ttft == 5.0
    assert summary.p99_ttft == pytest.approx(9.9)
    # Every request's gaps are 1 s and 2 s: 11 of each, so the median gap is the mean of
    # the 11th and 12th of 22 (1.5 s) and p99 is 2 s.
    assert summary.median_itl == pytest.approx(1.5)
    assert summary.p99_itl == 2.0
    assert summary.max_itl == 2.0


def test_replay_and_loadgen_agree_on_the_same_values():
    ttfts = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4, 0.5]
    requests = [_finished(i, [t, t + 0.01]) for i, t in enumerate(ttfts)]
    summary, loadgen = summarize_replay(requests), stats(ttfts)
    assert (summary.median_ttft, summary.p99_ttft) == (loadgen.p50, loadgen.p99)
    assert summary.p99_ttft == pytest.approx(0.7 + (0.9 - 0.7) * 0.94)


def test_one_token_requests_have_no_gaps():
    summary = summarize_replay([_finished(0, [0.5])])
    assert (summary.median_itl, summary.p99_itl, summary.max_itl) == (0.0, 0.0, 0.0)
    assert summary.p99_ttft == 0.5
