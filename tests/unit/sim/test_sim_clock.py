"""The engine clock at time scale 1: arrivals stamped when the server received a request, the
engine seeing it no earlier than it was handed over, and tokens never released early."""

import asyncio
import time

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.clock import EngineClock
from kvbench.sim.request import SimRequest

MODEL = "Qwen/Qwen3-0.6B"


def _clock() -> EngineClock:
    sim = build_engine(SimConfig(model=MODEL, max_model_len=4096, kv_cache_memory_bytes=1 << 30))
    return EngineClock(sim.core, time_scale=1.0)


def test_a_request_received_long_before_it_is_submitted_reaches_the_engine_when_submitted() -> None:
    """The server's work between receiving and submitting (tokenizing a huge prompt) is wall
    time the frontend latency models; where it took longer, the engine must not see the
    request in the past, or its TTFT would be reported shorter than the wire's."""

    async def main() -> tuple[SimRequest, float, float]:
        clock = _clock()
        clock.start()
        try:
            received = clock.now()
            await asyncio.sleep(0.2)
            request = SimRequest("late", list(range(1000, 1100)), 1, arrival_time=0.0)
            submitted = clock.now()
            clock.submit(request, received)
            return request, received, submitted
        finally:
            await clock.stop()

    request, received, submitted = asyncio.run(main())
    assert request.arrival_time == received
    assert request.engine_arrival_time >= submitted


def test_a_request_submitted_at_once_reaches_the_engine_after_the_frontend_latency() -> None:
    async def main() -> tuple[SimRequest, float]:
        clock = _clock()
        clock.start()
        try:
            request = SimRequest("prompt", list(range(1000, 1100)), 1, arrival_time=0.0)
            received = clock.now()
            clock.submit(request, received)
            return request, clock.core.cost.frontend_latency(100)
        finally:
            await clock.stop()

    request, latency = asyncio.run(main())
    assert latency > 0.001
    assert request.engine_arrival_time == request.arrival_time + latency


def test_no_token_is_released_before_its_step_ends() -> None:
    """uvloop's and libuv's timers count whole milliseconds and fire up to one early."""

    async def main() -> list[float]:
        clock = _clock()
        clock.start()
        early: list[float] = []
        done = asyncio.Event()

        def notify(r: SimRequest) -> None:
            due = clock._wall(r.token_times[r.num_output_tokens - 1])
            early.append(due - time.monotonic())
            if r.finished:
                done.set()

        try:
            request = SimRequest("decode", list(range(1000, 1600)), 12, arrival_time=0.0)
            request.notify = notify
            clock.submit(request)
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await clock.stop()
        return early

    early = asyncio.run(main())
    assert len(early) == 12
    assert max(early) <= 0, f"seconds early: {max(early)}"
