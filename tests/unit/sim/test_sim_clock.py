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


def test_a_held_token_is_released_when_the_next_launch_is_done() -> None:
    """Catches the clock sending a step's held tokens before the next step's launch is done
    (`EngineCore` holds them where that step is launched kernel by kernel): three 1,024-token
    misses at once on the H200 profile; the first's token is stamped after its own step's end
    (when the next one starts) and none reaches the client before its stamp."""

    async def main() -> tuple[list[SimRequest], list[float]]:
        config = SimConfig(model=MODEL, max_model_len=4096, kv_cache_memory_bytes=1 << 30,
                           profile="qwen3-0.6b-h200", max_num_batched_tokens=2048)  # fmt: skip
        clock = EngineClock(build_engine(config).core, time_scale=1.0)
        clock.start()
        early: list[float] = []
        finished = 0
        done = asyncio.Event()

        def notify(r: SimRequest) -> None:
            nonlocal finished
            early.append(clock._wall(r.token_times[r.num_output_tokens - 1]) - time.monotonic())
            finished += r.finished
            if finished == 3:
                done.set()

        misses = [SimRequest(f"m{i}", list(range(10_000 * (i + 1), 10_000 * (i + 1) + 1024)), 2,
                             arrival_time=0.0) for i in range(3)]  # fmt: skip
        try:
            for request in misses:
                request.notify = notify
                clock.submit(request)
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await clock.stop()
        return misses, early

    misses, early = asyncio.run(main())
    first, _, third = misses
    # The third waits for the next step (2,048-token budget), which starts as the first's ends.
    assert first.first_token_time > third.first_scheduled_time, "held for that step's launch"
    assert len(early) == 6 and max(early) <= 0, f"seconds early: {max(early)}"


def _published_stores(scale: float, requests: list[tuple[SimRequest, float]]):
    """Run `requests` (each submitted after its delay in wall seconds) on a clock at `scale`
    and give the wall time each BlockStored batch went out, with its first token id."""
    published: list[tuple[float, int]] = []

    def on_events(events) -> None:
        for event in events:
            if event[0] == "stored":
                published.append((time.monotonic(), event[3][0]))

    sim = build_engine(
        SimConfig(model=MODEL, max_model_len=4096, kv_cache_memory_bytes=1 << 30),
        on_kv_events=on_events,
    )
    clock = EngineClock(sim.core, time_scale=scale)

    async def main() -> None:
        clock.start()
        done = [asyncio.Event() for _ in requests]
        try:
            for (request, delay), event in zip(requests, done, strict=True):
                request.notify = lambda r, e=event: e.set() if r.finished else None
                await asyncio.sleep(delay)
                clock.submit(request)
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in done)), 60)
        finally:
            await clock.stop()

    asyncio.run(main())
    return clock, published


def test_a_prefill_on_an_idle_engine_publishes_its_blocks_when_its_step_ends() -> None:
    """vLLM publishes a step's cache events with the output it processes next: on an idle
    engine, that is the prefill's own, at its end. Catches events sent as the step is
    computed, which tell a KV-aware router of a prefix a step before real vLLM would, so that
    the next request of the prefix follows it where on the hardware it would not."""
    scale = 5.0  # a prefill step of some ms lasts five times as long on the wall clock
    alone = SimRequest("alone", list(range(1000, 3000)), 2, arrival_time=0.0)
    clock, published = _published_stores(scale, [(alone, 0.0)])
    first_store = min(t for t, token in published if token == 1000)
    step_end = clock._wall(alone.token_times[0])
    assert first_store >= step_end - 0.002


def test_a_step_decided_while_another_ran_publishes_as_it_starts() -> None:
    """Async scheduling: a prefill decided while a decode step ran goes out with that step's
    output, as the prefill starts, not a step later."""
    scale = 5.0
    decoding = SimRequest("decoding", list(range(1000, 1100)), 40, arrival_time=0.0)
    late = SimRequest("late", list(range(50_000, 52_000)), 2, arrival_time=0.0)
    clock, published = _published_stores(scale, [(decoding, 0.0), (late, 0.3)])
    store = min(t for t, token in published if token == 50_000)
    start, end = (clock._wall(x) for x in (late.first_scheduled_time, late.token_times[0]))
    assert end - start > 0.02
    assert store < start + (end - start) / 2
