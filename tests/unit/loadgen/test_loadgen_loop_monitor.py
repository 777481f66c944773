"""The client-bound judgement: a blocked event loop is caught, an idle one is not, and a run
without a single success is never judged."""

import asyncio
import time

import pytest

from kvbench.loadgen.loop_monitor import LoopMonitor, judge


def _watch(block: float, rounds: int) -> object:
    async def main() -> object:
        monitor = LoopMonitor(interval=0.002)
        monitor.start()
        for _ in range(rounds):
            await asyncio.sleep(0.004)
            time.sleep(block)  # the loop is held, as a saturated client holds it
        return await monitor.stop(lag_threshold=0.005, lateness_p99=None, succeeded=rounds)

    return asyncio.run(main())


def test_a_blocked_loop_is_client_bound() -> None:
    health = _watch(block=0.03, rounds=10)
    assert health.client_bound
    assert health.loop_lag_max >= 0.02
    assert any("event-loop lag" in reason for reason in health.reasons)


def test_an_idle_loop_is_not() -> None:
    health = _watch(block=0.0, rounds=10)
    assert health.cpu_utilization is not None and health.cpu_utilization < 0.9
    assert health.loop_lag_p50 is not None and health.loop_lag_p50 < 0.005


def test_lag_percentiles_are_the_summary_percentiles() -> None:
    lags = [i / 1000 for i in range(10, 0, -1)]  # 1..10 ms, unsorted
    health = judge(lags, cpu=0.1, lag_threshold=0.0099, lateness_p99=None, succeeded=10)
    assert health.loop_lag_p50 == pytest.approx(0.0055)  # nearest rank would give 6 ms
    assert health.loop_lag_p99 == pytest.approx(0.00991)
    assert health.loop_lag_max == 0.01 and health.client_bound
    assert not judge(
        lags, cpu=0.1, lag_threshold=0.00995, lateness_p99=None, succeeded=10
    ).client_bound


def test_a_run_without_a_success_is_never_client_bound() -> None:
    # Refusals come back at once and the client spins on them: the same lag and CPU are
    # client-bound with one success, and not judged at all with none.
    lags = [0.05] * 10
    busy = judge(lags, cpu=1.0, lag_threshold=0.005, lateness_p99=None, succeeded=1)
    refused = judge(lags, cpu=1.0, lag_threshold=0.005, lateness_p99=None, succeeded=0)
    assert (busy.client_bound, len(busy.reasons)) == (True, 2)
    assert (refused.client_bound, refused.reasons, refused.cpu_utilization) == (False, [], 1.0)
