"""The simulated engine core: a deterministic loop over steps on a virtual clock.

``EngineCore.step()`` admits every request whose engine arrival time has come,
asks the scheduler for a batch, advances the clock by the batch's cost and samples
tokens at the step's end. Nothing here reads a wall clock, so a run is a pure
function of the requests and their arrival times: tests and benchmarks drive it
directly (``kvbench.sim.replay``), the server drives it through
``kvbench.sim.clock`` which maps the virtual clock onto wall time.

Async scheduling (vLLM's default: ``VllmConfig`` resolves ``async_scheduling=None`` to
True; ``async_scheduling=False`` here is vLLM's ``--no-async-scheduling``) keeps two
batches in flight (``EngineCore.step_with_batch_queue``): the batch that runs next was
decided when the current one started, before its outputs came back. So a step sees only
the requests that reached the engine before the previous step started, and the blocks of
requests that finished in the previous step are freed after its decision, not before.
Where that decision found nothing to run (vLLM queued an empty batch), the step is decided
again at its start with everything that has arrived. vLLM launches the next step before it
processes the current one's outputs (its one-process executor launches in the engine's own
thread), so where the next step is one the host launches kernel by kernel (beyond the CUDA
graphs), the current step's tokens come out when that launch is done, not at its end.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from kvbench.sim.block_pool import KVEvent
from kvbench.sim.gpu_share import GpuShare
from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.metrics import EngineGauges, EngineStats
from kvbench.sim.request import FinishReason, RequestStatus, SimRequest
from kvbench.sim.scheduler import Batch, Scheduler
from kvbench.sim.timing import CostModel

__all__ = ["EngineCore", "StepResult"]


@dataclass(slots=True)
class StepResult:
    """What one step did: its virtual interval and the requests it touched."""

    start: float
    end: float
    num_tokens: int
    num_requests: int
    produced: list[SimRequest]
    finished: list[SimRequest]
    pipelined: bool = False
    """Decided while the previous step ran (async scheduling). vLLM publishes the cache
    events of a step's scheduling with the output it processes next: a pipelined step's go
    out as it starts (with its predecessor's output), any other's when it ends."""
    settled: bool = True
    """False while nothing is produced yet: a long step on a shared GPU whose end others can
    still move (`end` is its end as far as is known), or a step whose outputs wait for the
    next step's launch (`EngineCore.step` releases them once that is decided)."""


@dataclass(slots=True)
class _Begun:
    """A step begun whose outputs are due when it settles: a long step on a shared GPU
    (`end` None: the share says when it ends), or a step begun while the previous one's
    outputs were held (`end` known)."""

    batch: Batch
    start: float
    pipelined: bool
    end: float | None = None


_SETTLE_SLACK = 1e-9
"""Seconds by which a long step's end may move from rounding alone."""


class EngineCore:
    """Scheduler + KV cache + cost model on one virtual clock; `gpu` when the GPU is shared
    with other workers (each step's GPU time then depends on theirs)."""

    def __init__(
        self,
        *,
        kv: KVCacheManager,
        scheduler: Scheduler,
        cost: CostModel,
        stats: EngineStats,
        on_kv_events: Callable[[list[KVEvent]], None] | None = None,
        async_scheduling: bool = True,
        gpu: GpuShare | None = None,
    ) -> None:
        self.kv = kv
        self.gpu = gpu
        self.scheduler = scheduler
        self.async_scheduling = async_scheduling
        scheduler.hold_finished = async_scheduling
        self._last_start = 0.0
        self._last_end: float | None = None
        self.cost = cost
        self.stats = stats
        self.on_kv_events = on_kv_events
        self.clock = 0.0
        self.num_steps = 0
        self._arrivals: list[tuple[float, int, SimRequest]] = []
        self._seq = itertools.count()
        self._sampled: list[SimRequest] = []
        """The requests the last step sampled a token for: in flight while the next step is
        decided under async scheduling (`SimRequest.num_output_placeholders`)."""
        self._begun: _Begun | None = None
        self._held: StepResult | None = None
        """A step's result, applied to the scheduler at its end but not yet released: under
        async scheduling vLLM processes a step's outputs only once the next step is
        launched."""
        self._launch_s = 0.0
        """Seconds after its start the host had launched the last step (a step beyond the CUDA
        graphs launches kernel by kernel): when the next one was decided."""

    @property
    def has_work(self) -> bool:
        return bool(self._arrivals) or self.busy

    @property
    def busy(self) -> bool:
        """True while requests are queued or running (not only announced), or a step is yet
        to settle."""
        return self.scheduler.has_work or self._begun is not None or self._held is not None

    def next_arrival_time(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def add_request(self, request: SimRequest) -> None:
        """Announce a request; it reaches the scheduler at its engine arrival time."""
        heapq.heappush(self._arrivals, (request.engine_arrival_time, next(self._seq), request))

    def abort(self, request: SimRequest) -> None:
        """Cancel a request wherever it is (a client that went away). Like vLLM, which drops
        a client-aborted request's state before its stats are recorded
        (``OutputProcessor.abort_requests``), it is not counted as finished."""
        if request.status is RequestStatus.FINISHED:
            return
        if request.status is RequestStatus.WAITING and request not in self.scheduler.waiting:
            request.status = RequestStatus.FINISHED
            request.finish_reason = FinishReason.ABORT
            request.finish_time = max(self.clock, request.engine_arrival_time)
        else:
            self.scheduler.abort(request, self.clock)
        self._flush_events()

    def _admit(self, horizon: float) -> None:
        arrivals, add = self._arrivals, self.scheduler.add_request
        while arrivals and arrivals[0][0] <= horizon:
            request = heapq.heappop(arrivals)[2]
            if request.status is not RequestStatus.FINISHED:
                add(request)

    def step(self) -> StepResult | None:
        """Run one engine step; None when there is nothing to do at all. A step may take more
        than one call, each result `settled` but the last: a long step on a shared GPU, one
        that starts it and one at its end; held outputs (`_complete`), one at the step's end
        and one that releases them once the next step is decided."""
        if self._begun is not None:
            return self._settle(self._begun)
        held = self._held
        scheduler = self.scheduler
        pipelined = self.async_scheduling and self._last_end == self.clock
        # Under async scheduling the next step is decided once the host has launched this one.
        decided = self._last_start + self._launch_s
        horizon = decided if pipelined else self.clock
        while True:
            if not scheduler.has_work:
                if held is not None:  # no next step decided now: vLLM waits for the outputs
                    return self._release(held, held.end)
                if not self._arrivals:
                    scheduler.release_finished()
                    return None
                if self._arrivals[0][0] > horizon:
                    pipelined = False
                    self.clock = horizon = max(self.clock, self._arrivals[0][0])
            self._admit(horizon)
            if scheduler.has_work:
                break
        start = self.clock
        if not pipelined:
            scheduler.release_finished()
        in_flight = self._sampled if pipelined else ()
        for request in in_flight:
            request.num_output_placeholders = 1
        batch = scheduler.schedule(start)
        for request in in_flight:
            request.num_output_placeholders = 0
        scheduler.release_finished()
        # Decided while the previous step ran (async scheduling): the host launched it then.
        head_start = start - decided if pipelined else 0.0
        if not batch.requests and pipelined:
            self._admit(start)
            batch = scheduler.schedule(start)
            head_start = 0.0
            pipelined = False
        if not batch.requests:
            if held is not None:
                return self._release(held, held.end)
            self._last_end = None
            return self._unschedulable(start)
        self._launch_s = 0.0
        if self.cost.beyond_graphs(batch.num_tokens):
            work, host, launch = self.cost.uncaptured_step(
                batch.num_tokens, batch.context_tokens, batch.attention_pairs, head_start
            )
            self._launch_s = (1.0 - self.cost.uncaptured_gpu_fraction) * work
            if self.gpu is not None:
                begun = self._begin_long(batch, start, work, host, launch, pipelined)
                if held is None:
                    return begun
        if self._begun is None:  # not a long step begun on the shared GPU above
            end = start + self.cost.step_time(
                batch.num_tokens,
                batch.context_tokens,
                batch.attention_pairs,
                self._sharing(start),
                head_start,
            )
            if self.gpu is not None:
                self.gpu.occupy(start, end)
            if held is None:
                return self._complete(batch, start, end, pipelined)
            self._begun = _Begun(batch, start, pipelined, end)
        # The held outputs come out once this step is launched: vLLM's engine launches the
        # next step before it blocks on the last one's outputs (`step_with_batch_queue`).
        assert held is not None
        return self._release(held, start + self._launch_s if pipelined else held.end)

    def _complete(self, batch: Batch, start: float, end: float, pipelined: bool) -> StepResult:
        """The step's outputs at its end: tokens sampled, requests finished, events out. Under
        async scheduling they are held (`_held`) where the next step may be one the host
        launches kernel by kernel: vLLM processes them once that launch is done."""
        scheduler = self.scheduler
        self.clock = end
        self._last_start, self._last_end = start, end
        self.num_steps += 1
        produced, finished = scheduler.update_from_output(batch, end)
        self._sampled = produced
        if not scheduler.has_work:
            scheduler.release_finished()  # no next decision to hide them from: vLLM freed them
        self._flush_events()
        result = StepResult(
            start, end, batch.num_tokens, len(batch.requests), produced, finished, pipelined
        )
        if self._next_may_launch_long(start):
            self._held = result
            return replace(result, produced=[], finished=[], settled=False)
        self._record(produced, finished)
        return result

    def _next_may_launch_long(self, start: float) -> bool:
        """Whether the step after the one that started at `start` may be decided before its
        outputs are processed and be launched kernel by kernel: then its launch delays them.
        Conservative (a held output whose next step is short comes out at its step's end), and
        never where a long step's launch is not modelled (no GPU share `f` below 1)."""
        if not self.async_scheduling or self.cost.uncaptured_gpu_fraction >= 1.0:
            return False
        scheduler = self.scheduler
        if not scheduler.has_work:
            return False
        if self._launch_s > 0.0 or scheduler.waiting:
            return True  # arrivals by the next decision may not all be known yet
        if self._arrivals and self._arrivals[0][0] <= start:
            return True
        running = scheduler.running
        if self.cost.beyond_graphs(len(running)):
            return True
        return any(r.num_computed_tokens < r.num_prompt_tokens for r in running)

    def _release(self, held: StepResult, at: float) -> StepResult:
        """The held step's outputs, processed at `at` (no sooner than its end): its tokens and
        finishes are stamped then, as vLLM stamps them when it processes the outputs."""
        self._held = None
        produced = [r for r in held.produced if r.finish_reason is not FinishReason.ABORT]
        if at > held.end:
            for request in produced:
                request.token_times[-1] = at
                if len(request.token_times) == 1:
                    request.first_token_time = at
            for request in held.finished:
                request.finish_time = at
        self.clock = at  # a long step begun on a shared GPU settles from here
        self._record(produced, held.finished)
        return replace(held, end=at, produced=produced)

    def _record(self, produced: list[SimRequest], finished: list[SimRequest]) -> None:
        stats = self.stats
        if produced:
            stats.on_step(produced)
        for request in finished:
            stats.on_finished(request)

    def _begin_long(
        self, batch: Batch, start: float, work: float, host: float, launch: float,
        pipelined: bool,
    ) -> StepResult:  # fmt: skip
        """A step beyond the CUDA graphs on a shared GPU (`CostModel.uncaptured_step`'s parts):
        it waits out the others' captured steps, then its GPU work (a share of its time: the
        host launches the rest) is shared with the other workers' long steps, so its end moves
        when another begins during it. Its outputs wait for `step()` at its end
        (`_settle`)."""
        gpu = self.gpu
        assert gpu is not None
        wait = gpu.others_remaining(start)
        floor = max(start + launch, start + wait + work + host)
        gpu_s = self.cost.uncaptured_gpu_fraction * work
        end = gpu.begin_long(start, wait, gpu_s, host, floor)
        self._begun = _Begun(batch, start, pipelined)
        self.clock = end
        return StepResult(start, end, batch.num_tokens, len(batch.requests), [], [], pipelined,
                          settled=False)  # fmt: skip

    def _settle(self, begun: _Begun) -> StepResult:
        """At the end the step was given: it ends now unless, on a shared GPU, a long step
        that began on another worker since has moved its end (then the clock moves there,
        nothing done)."""
        end = begun.end
        if end is None:
            assert self.gpu is not None
            end = self.gpu.long_end(self.clock)
            if end > self.clock + _SETTLE_SLACK:
                self.clock = end
                batch = begun.batch
                return StepResult(begun.start, end, batch.num_tokens, len(batch.requests), [],
                                  [], settled=False)  # fmt: skip
            end = self.clock
        self._begun = None
        return self._complete(begun.batch, begun.start, end, begun.pipelined)

    def decode_steps(self, limit: float) -> tuple[list[SimRequest], float]:
        """Run the steps that are one decode token for every running request, decided before
        `limit`, as `step()` would run them one by one, without its per-step bookkeeping; stop
        at the first step that finishes a request (its requests are returned with the step's
        end) or that `step()` must decide itself: a request waits or arrives by the step's
        start, one was held from the previous step, or a request needs more than a decode
        token or more blocks than are free. The caller (the virtual timeline) guarantees that
        no request it has not yet announced can arrive before `limit`.

        Where no latency histogram is kept (`EngineStats.observe_latencies`), the steps up to
        the next block boundary or finish are one stretch: their ends are a sum of step times
        and each request's tokens are appended at once (`_stretch`)."""
        if self._begun is not None or self._held is not None:
            return [], self.clock  # step() settles the step or releases the outputs
        steps = self.num_steps
        if self.async_scheduling and self._last_end == self.clock:
            sampled = sum(1 for r in self._sampled if r.status is RequestStatus.RUNNING)
            if sampled != len(self.scheduler.running):
                return [], self.clock  # one ran without a token to wait for: step() decides
        done = self._decode_steps(limit)
        if self.num_steps != steps:
            self._sampled = list(self.scheduler.running)
        return done

    def _decode_steps(self, limit: float) -> tuple[list[SimRequest], float]:
        """`decode_steps` once every running request sampled in the previous step, if any."""
        scheduler, kv, stats, cost = self.scheduler, self.kv, self.stats, self.cost
        gpu = self.gpu
        running = scheduler.running
        bs, pool = kv.block_size, kv.pool
        last = scheduler.max_model_len - 1
        max_len, hold = scheduler.max_model_len, scheduler.hold_finished
        arrivals = self._arrivals
        stretch = not stats.observe_latencies
        while running and not scheduler.waiting and not scheduler._held:
            start = self.clock
            if start >= limit or (arrivals and arrivals[0][0] <= start):
                break
            if len(running) > scheduler.max_num_batched_tokens or cost.beyond_graphs(len(running)):
                break
            context, needs, touch = 0, 0, False
            plain = finish = max_len  # steps with no block to take or fill; steps to a finish
            # Pipelined, each request's last token is in flight: blocks it fills cache a step
            # later (`SimRequest.num_output_placeholders`).
            lag = 1 if self.async_scheduling and self._last_end == start else 0
            for request in running:
                computed = request.num_computed_tokens
                after = computed + 1
                decode = request.num_prompt_tokens + request.num_output_tokens == after
                if not decode or computed >= last:
                    return [], start
                room = len(request.blocks) * bs
                if after > room:
                    needs += 1
                    touch = True
                elif (after - lag) // bs > request.num_cached_blocks:
                    touch = True
                context += after
                if stretch and not touch:
                    fill = (request.num_cached_blocks + 1) * bs - after + lag
                    plain = min(plain, fill, last - computed)  # fill <= room - computed
                    out = request.num_output_tokens
                    finish = min(
                        finish, request.max_tokens - out, max_len - request.num_prompt_tokens - out
                    )
            if needs > len(pool.free_queue):
                break
            if stretch and not touch and min(plain, finish) > 1:
                done = self._stretch(min(plain, finish), finish, context, limit)
                if done is not None:
                    return done
                continue
            if touch:
                for request in running:
                    request.num_output_placeholders = lag
                    allocated = kv.allocate_slots(request, 1)
                    request.num_output_placeholders = 0
                    assert allocated, "blocks were counted free"
            end = start + cost.step_time(
                len(running), context, float(context), self._sharing(start)
            )
            if gpu is not None:
                gpu.occupy(start, end)
            self.clock = end
            self._last_start, self._last_end = start, end
            self._launch_s = 0.0
            self.num_steps += 1
            finished = []
            for request in running:
                request.num_computed_tokens += 1
                num_tokens = request.num_prompt_tokens + request.num_output_tokens
                request.num_output_tokens += 1
                request.token_times.append(end)
                if request.num_output_tokens >= request.max_tokens or num_tokens + 1 >= max_len:
                    scheduler._finish(request, end, FinishReason.LENGTH, hold=hold)
                    finished.append(request)
            stats.on_step(running)
            if finished:
                return self._finished(finished, end)
            self._flush_events()
        return [], self.clock

    def _stretch(
        self, steps: int, finish: int, context: int, limit: float
    ) -> tuple[list[SimRequest], float] | None:
        """Up to `steps` decode steps of the running batch, none taking or filling a block,
        the `finish`-th finishing a request; each decided before `limit` and before the next
        arrival. The same step times, in the same order of additions, as one step at a time.
        Returns what finished, or None when the stretch ended without a finish."""
        scheduler, running, cost = self.scheduler, self.scheduler.running, self.cost
        batch = len(running)
        arrival = self._arrivals[0][0] if self._arrivals else math.inf
        first = limit if limit < arrival else arrival
        ends: list[float] = []
        start = self.clock
        gpu = self.gpu
        for _ in range(steps):
            if start >= first:
                break
            end = start + cost.step_time(batch, context, float(context), self._sharing(start))
            ends.append(end)
            self._last_start, start = start, end
            context += batch
        if not ends:
            return [], self.clock
        if gpu is not None:
            gpu.occupy(self.clock, start)
        taken = len(ends)
        self.clock = self._last_end = start
        self._launch_s = 0.0
        self.num_steps += taken
        self.stats.generation_tokens += batch * taken
        for request in running:
            request.num_computed_tokens += taken
            request.num_output_tokens += taken
            request.token_times.extend(ends)
        if taken < finish:
            return None if taken == steps else ([], start)
        max_len, finished = scheduler.max_model_len, []
        for request in running:
            if (
                request.num_output_tokens >= request.max_tokens
                or request.num_prompt_tokens + request.num_output_tokens >= max_len
            ):
                scheduler._finish(request, start, FinishReason.LENGTH, hold=scheduler.hold_finished)
                finished.append(request)
        return self._finished(finished, start)

    def _sharing(self, start: float) -> int:
        """The workers running a step on this engine's GPU at `start`, this one included."""
        return 1 if self.gpu is None else 1 + self.gpu.others_running(start)

    def _finished(self, finished: list[SimRequest], end: float) -> tuple[list[SimRequest], float]:
        """After a decode step that finished `finished`: as `step()` leaves the scheduler."""
        scheduler = self.scheduler
        scheduler.running = [r for r in scheduler.running if r.status is not RequestStatus.FINISHED]
        if not scheduler.has_work:
            scheduler.release_finished()
        for request in finished:
            self.stats.on_finished(request)
        self._flush_events()
        return finished, end

    def _unschedulable(self, now: float) -> StepResult:
        """Nothing fits although nothing runs: the head request can never fit; drop it."""
        scheduler = self.scheduler
        if scheduler.running or not scheduler.waiting:
            raise RuntimeError("scheduler made no progress with running requests")
        request = scheduler.waiting[0]
        scheduler.abort(request, now)
        self.stats.on_finished(request)
        self._flush_events()
        return StepResult(now, now, 0, 0, [], [request])

    def _flush_events(self) -> None:
        if self.on_kv_events is not None:
            events = self.kv.pool.take_events()
            if events:
                self.on_kv_events(events)

    def gauges(self) -> EngineGauges:
        """Current gauge and counter values for ``/metrics``."""
        kv_stats = self.kv.stats
        return EngineGauges(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_cache_usage=self.kv.usage,
            num_preemptions=self.scheduler.num_preemptions,
            prefix_queries=kv_stats.queries,
            prefix_hits=kv_stats.hits,
        )

    def reset_prefix_cache(self) -> bool:
        ok = self.kv.reset_prefix_cache()
        self._flush_events()
        return ok
