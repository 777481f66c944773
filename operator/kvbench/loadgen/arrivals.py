"""When each request is sent: closed loop, Poisson open loop, or a fixed schedule.

Arrival offsets are computed before anything is sent (from the seed, like the prompts), and
`drive` only carries them out, so the schedule is as reproducible as the sequence and the
time a request was due is known apart from the time it was actually sent.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from kvbench.api.status import Point
from kvbench.loadgen.workload import Request
from kvbench.loadgen.workload.tokens import rng_for

__all__ = ["Schedule", "Send", "drive", "measured_schedule", "warmup_schedule"]

Send = Callable[[Request, float], Awaitable[None]]
"""Sends one request; the float is the perf_counter time at which it was due."""


@dataclass(frozen=True)
class Schedule:
    """How a phase is paced. `offsets` are wall seconds from the phase start (open loop)."""

    kind: Literal["closed", "poisson", "scheduled"]
    cap: int
    offsets: tuple[float, ...] | None = None


def measured_schedule(
    requests: list[Request], point: Point, seed: int, time_scale: float, capped: bool = False
) -> Schedule:
    """Closed loop at the point's concurrency, Poisson at its rate, or the workload's offsets.

    Rates and offsets are in server seconds; a time-scaled simulator runs `time_scale` wall
    seconds per server second, so the wall schedule is stretched by it. A workload's offsets
    run all at once (the interference stream and its injections) unless `capped` (a trace
    replay): then in flight is capped by the point's concurrency, as a Poisson point's is.
    """
    if any(r.offset is not None for r in requests):
        offsets = tuple((r.offset or 0.0) * time_scale for r in requests)
        cap = point.concurrency if capped else len(requests)
        return Schedule("scheduled", cap=cap, offsets=offsets)
    if point.request_rate is None:
        return Schedule("closed", cap=point.concurrency)
    rng, t, offsets = rng_for(seed, "arrivals"), 0.0, []
    for _ in requests:
        offsets.append(t * time_scale)
        t += rng.expovariate(point.request_rate)
    return Schedule("poisson", cap=point.concurrency, offsets=tuple(offsets))


def warmup_schedule(point: Point, scheduled: bool) -> Schedule:
    """Warm-ups run closed loop: at the point's concurrency, or one at a time for a schedule."""
    return Schedule("closed", cap=1 if scheduled else point.concurrency)


async def drive(requests: list[Request], schedule: Schedule, send: Send) -> None:
    """Send every request as the schedule says and return when all have finished."""
    if schedule.offsets is None:
        await _closed_loop(requests, schedule.cap, send)
    else:
        await _open_loop(requests, schedule.offsets, schedule.cap, send)


async def _closed_loop(requests: list[Request], concurrency: int, send: Send) -> None:
    pending = iter(requests)

    async def worker() -> None:
        for request in pending:
            await send(request, time.perf_counter())

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))


async def _open_loop(
    requests: list[Request], offsets: tuple[float, ...], cap: int, send: Send
) -> None:
    """Due times are fixed up front; a request that finds `cap` in flight waits for a slot,
    and its lateness (sent minus due) is recorded by the caller."""
    slots = asyncio.Semaphore(cap)
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()

    async def one(request: Request, due: float) -> None:
        try:
            await send(request, due)
        finally:
            slots.release()

    for request, offset in zip(requests, offsets, strict=True):
        due = start + offset
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        tasks.append(asyncio.create_task(one(request, due)))
    await asyncio.gather(*tasks)
