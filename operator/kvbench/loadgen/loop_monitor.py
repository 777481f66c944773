"""Is the client setting the pace? Event-loop lag and CPU use over the measured window.

A Python client at saturation measures its own queue, not the server: every timestamp waits
for the loop. A ticker that asks to wake every few milliseconds sees how late it wakes (the
lag); the process's CPU time over the window says how much of a core the client used. Either
one high marks the run client-bound, unless no request succeeded: a client that is only
handed refusals spins as fast as they come back, and a window without a single measured
answer has no pace of the server to compare it with.
"""

import asyncio
import contextlib
import time

from pydantic import Field

from kvbench.api.base import ApiModel
from kvbench.loadgen.summary import percentile

__all__ = ["ClientHealth", "LoopMonitor", "judge"]

_BUSY_CPU = 0.9


class ClientHealth(ApiModel):
    """How hard the client worked during the measured window."""

    loop_lag_p50: float | None = None
    loop_lag_p99: float | None = None
    loop_lag_max: float | None = None
    cpu_utilization: float | None = Field(None, description="Process CPU s / wall s (1 = a core)")
    lateness_p99: float | None = Field(
        None, description="Open loop: sent minus due, p99 (waiting for a free slot included)"
    )
    client_bound: bool = False
    reasons: list[str] = Field(default_factory=list)


class LoopMonitor:
    """Samples loop lag every `interval` seconds between `start()` and `stop()`."""

    def __init__(self, interval: float = 0.005) -> None:
        self._interval = interval
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            due = time.perf_counter() + self._interval
            await asyncio.sleep(self._interval)
            self._lags.append(max(0.0, time.perf_counter() - due))

    async def stop(
        self, lag_threshold: float, lateness_p99: float | None, succeeded: int
    ) -> ClientHealth:
        """Stop sampling and judge the window (`judge`)."""
        cpu = (time.process_time() - self._cpu0) / max(time.perf_counter() - self._wall0, 1e-9)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return judge(self._lags, cpu, lag_threshold, lateness_p99, succeeded)


def judge(
    lags: list[float],
    cpu: float,
    lag_threshold: float,
    lateness_p99: float | None,
    succeeded: int,
) -> ClientHealth:
    """Client-bound if the loop lag's p99 or the CPU use is too high and at least one
    measured request succeeded (`succeeded`); without a success the lag and CPU are kept
    but not judged."""
    ordered = sorted(lags)
    health = ClientHealth(cpu_utilization=round(cpu, 4), lateness_p99=lateness_p99)
    if ordered:
        health.loop_lag_p50 = round(percentile(ordered, 50), 6)
        health.loop_lag_p99 = round(percentile(ordered, 99), 6)
        health.loop_lag_max = round(ordered[-1], 6)
    reasons = []
    if health.loop_lag_p99 is not None and health.loop_lag_p99 > lag_threshold:
        reasons.append(
            f"event-loop lag p99 {health.loop_lag_p99 * 1e3:.1f} ms > {lag_threshold * 1e3:.1f} ms"
        )
    if cpu > _BUSY_CPU:
        reasons.append(f"the client used {cpu:.0%} of a core")
    if succeeded:
        health.reasons, health.client_bound = reasons, bool(reasons)
    return health
