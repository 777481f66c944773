"""Drives the engine core from asyncio, mapping its virtual clock onto wall time.

``time_scale`` S is wall seconds per simulated second. With S > 0 virtual time is
``(time.monotonic() - start) / S`` (not ``loop.time()``, which uvloop keeps in whole
milliseconds): a request arriving over HTTP is stamped with that
value, and a step's tokens are released when the wall clock reaches the step's end.
When this process falls behind (a busy machine), steps run back to back until the
engine has caught up; decisions still follow the virtual stamps, so a slow machine
delays delivery but does not change what the engine decides for the same arrivals.
With S = 0 nothing waits: a request is stamped with the engine's current clock and
the engine yields to the event loop between steps so that HTTP I/O interleaves.

KV cache events go out when vLLM's would (``Scheduler.update_from_output`` publishes what
the scheduling since the last output produced): a step decided while the previous one ran
(async scheduling) publishes as it starts, with its predecessor's output; any other step,
the first after an idle engine included, when it ends. A KV-aware router therefore learns
of a prefill on an idle worker only once its step is over, as on the hardware.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from kvbench.sim.block_pool import KVEvent
from kvbench.sim.engine import EngineCore
from kvbench.sim.request import SimRequest

TIMER_RESOLUTION = 0.001
"""The event loop's timers (uvloop's, libuv's) count whole milliseconds: one fires up to this
early or late."""
PRECISE_RELEASE_STEP = 2 * TIMER_RESOLUTION
"""Wall seconds a step must last for its tokens to be released at its end to the timer's
precision: the timer is set one resolution early and the rest is waited out yielding to the
loop. Shorter steps (small time scales, where clients read the simulator's own timings) are
not worth a spinning loop."""

__all__ = ["EngineClock"]


class EngineClock:
    """An asyncio task stepping one ``EngineCore``."""

    def __init__(self, core: EngineCore, *, time_scale: float) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.core = core
        self.time_scale = time_scale
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._origin = 0.0
        self._publish = core.on_kv_events
        self._held: list[KVEvent] | None = None
        """A step's cache events, held until it ends (`StepResult.pipelined`); None when
        nothing is held and events go out as they come."""
        if self._publish is not None:
            core.on_kv_events = self._on_kv_events

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._origin = time.monotonic() - self.core.clock * self.time_scale
        if self.core.gpu is not None:
            self.core.gpu.bind(self._wall)
        self._task = loop.create_task(self._run(), name="kvbench-sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def now(self) -> float:
        """The current virtual time as seen by an arriving request."""
        if self.time_scale > 0:
            wall = (time.monotonic() - self._origin) / self.time_scale
            return max(wall, 0.0)
        return self.core.clock

    def submit(self, request: SimRequest, received: float | None = None) -> None:
        """Stamp the request's arrival and hand it to the engine. At S > 0 the arrival is
        ``received``, the ``now()`` at which the request reached the server, as vLLM stamps
        it before tokenizing: the server's own work since (reading, validating, tokenizing:
        wall time outside the simulated clock) is part of the modelled frontend latency, and
        where it took longer, the engine sees the request when it really got it. Either way
        the TTFT reported is the one a client sees. At S = 0 the arrival is the engine's
        clock when submitted."""
        now = self.now()
        if received is None or self.time_scale == 0:
            received = now
        request.arrival_time = received
        request.engine_arrival_time = max(
            received + self.core.cost.frontend_latency(request.num_prompt_tokens), now
        )
        self.core.add_request(request)
        self._wake.set()

    def abort(self, request: SimRequest) -> None:
        self.core.abort(request)

    def _on_kv_events(self, events: list[KVEvent]) -> None:
        if self._held is not None:
            self._held.extend(events)
        elif self._publish is not None:
            self._publish(events)

    def _release_events(self) -> None:
        held, self._held = self._held, None
        if held and self._publish is not None:
            self._publish(held)

    def _wall(self, virtual: float) -> float:
        return self._origin + virtual * self.time_scale

    async def _run(self) -> None:
        core, scale = self.core, self.time_scale
        while True:
            if not core.has_work:
                self._wake.clear()
                await self._wake.wait()
                continue
            if scale > 0 and not core.busy:
                next_arrival = core.next_arrival_time()
                now = time.monotonic()
                delay = 0.0 if next_arrival is None else self._wall(next_arrival) - now
                if delay > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
                    continue
            self._held = []
            result = core.step()
            if result is None or result.pipelined:
                self._release_events()
            if result is None:
                continue
            if scale > 0:
                due = self._wall(result.end)
                if (result.end - result.start) * scale < PRECISE_RELEASE_STEP:
                    await asyncio.sleep(max(due - time.monotonic(), 0.0))
                else:
                    await asyncio.sleep(max(due - time.monotonic() - TIMER_RESOLUTION, 0.0))
                    while time.monotonic() < due:
                        await asyncio.sleep(0)
            else:
                await asyncio.sleep(0)
            self._release_events()
            for request in result.produced:
                if request.notify is not None:
                    request.notify(request)
            if not result.produced:
                for request in result.finished:
                    if request.notify is not None:
                        request.notify(request)
