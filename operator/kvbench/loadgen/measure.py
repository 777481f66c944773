"""One run: warm-up, counters, the measured window, counters again, the result document.

The counters are read right before the first measured request and right after the last one
finished, so the deltas cover the measured requests and nothing else; warm-up requests run
first, to completion, and appear in the document only as records marked `warmup`.
"""

import asyncio
import contextlib
import gc
import signal
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from kvbench.api.units import parse_duration
from kvbench.loadgen.arrivals import Schedule, drive, measured_schedule, warmup_schedule
from kvbench.loadgen.attribution import attribute_responses
from kvbench.loadgen.client import Attempt, Client, encode_body, encode_chat
from kvbench.loadgen.columns import RequestColumns
from kvbench.loadgen.config import (
    DirectMetrics,
    MetricsConfig,
    PrefixAffinityTarget,
    RunConfig,
    UrlTarget,
)
from kvbench.loadgen.conversations import drive_conversations
from kvbench.loadgen.counters import CounterSource, DirectCounters, PodCounters, pod_deltas
from kvbench.loadgen.loop_monitor import LoopMonitor
from kvbench.loadgen.prometheus import PrometheusCounters
from kvbench.loadgen.records import RequestRecord, to_record
from kvbench.loadgen.results import Conditions, CounterReport, LoadgenResult, Window, versions
from kvbench.loadgen.routing import make_router
from kvbench.loadgen.summary import percentile, summarize_records, warnings
from kvbench.loadgen.workload import Request, Sequence, build_sequence
from kvbench.loadgen.workload.mooncake import Trace

__all__ = [
    "ProgressCallback",
    "conditions_of",
    "event_loop_name",
    "make_counter_source",
    "run_load",
    "run_sync",
]

ProgressCallback = Callable[[str, int, int], None]
"""Called as (phase, done, total) after every finished request."""


def run_sync(
    config: RunConfig, progress: ProgressCallback | None = None, trace: Trace | None = None
) -> LoadgenResult:
    """Run on uvloop when it is installed (the measured path's speed depends on it). SIGTERM
    (a Job's deadline, a deleted pod) stops the run and returns what it has, marked partial."""

    async def until_terminated() -> LoadgenResult:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        return await run_load(config, progress, stop, trace)

    try:
        import uvloop
    except ImportError:
        return asyncio.run(until_terminated())
    return uvloop.run(until_terminated())


def make_counter_source(metrics: MetricsConfig | None) -> CounterSource | None:
    if metrics is None:
        return None
    if isinstance(metrics, DirectMetrics):
        return DirectCounters(metrics)
    return PrometheusCounters(metrics)


def event_loop_name() -> str:
    loop = type(asyncio.get_running_loop())
    if loop.__module__.startswith("uvloop"):
        import uvloop

        return f"uvloop {uvloop.__version__}"
    return "asyncio"


class _Phase:
    """Sends one phase's requests and keeps every attempt, in sequence order."""

    def __init__(
        self,
        config: RunConfig,
        client: Client,
        progress: ProgressCallback | None,
        groups: int | None,
    ) -> None:
        self.router = make_router(config.target, config.path, groups)
        self._client, self._config, self._progress = client, config, progress
        self._nvext = isinstance(config.target, UrlTarget) and config.target.nvext

    def prepare(
        self, name: str, requests: list[Request], schedule: Schedule
    ) -> Coroutine[Any, Any, list[Attempt]]:
        """The phase, ready to run: bodies encoded ahead, so the window holds sending only
        (a conversation's turns are encoded as they go: they carry the answers so far)."""
        if self._config.workload.conversation is not None:
            return self.converse(name, requests)
        config = self._config
        bodies = [encode_body(r, config.model, config.api, self._nvext) for r in requests]
        return self.run(name, requests, bodies, schedule)

    async def run(
        self, name: str, requests: list[Request], bodies: list[bytes], schedule: Schedule
    ) -> list[Attempt]:
        attempts: list[Attempt | None] = [None] * len(requests)
        self.sent = attempts
        done = 0

        async def send(request: Request, due: float) -> None:
            nonlocal done
            route = self.router.route(request)
            attempt = Attempt(request, route.endpoint, due)
            attempts[request.index] = attempt
            await self._client.send(route.url, bodies[request.index], attempt)
            done += 1
            if self._progress is not None:
                self._progress(name, done, len(requests))

        await drive(requests, schedule, send)
        return [a for a in attempts if a is not None]

    async def converse(self, name: str, requests: list[Request]) -> list[Attempt]:
        """A conversation workload's phase: each turn encoded when it is sent, with the
        answers its conversation got so far (`drive_conversations`)."""
        conversation = self._config.workload.conversation
        assert conversation is not None
        think = parse_duration(conversation.think_time) * self._config.time_scale
        attempts: list[Attempt | None] = [None] * len(requests)
        self.sent = attempts
        done = 0

        def finished() -> None:
            nonlocal done
            done += 1
            if self._progress is not None:
                self._progress(name, done, len(requests))

        async def send(request: Request, due: float, history: list[dict[str, str]]) -> Attempt:
            route = self.router.route(request)
            attempt = attempts[request.index] = Attempt(request, route.endpoint, due)
            body = encode_chat(request, history, self._config.model, self._nvext)
            await self._client.send(route.url, body, attempt)
            finished()
            return attempt

        def skip(request: Request, why: str) -> None:
            attempt = attempts[request.index] = Attempt(request, "", time.perf_counter())
            attempt.start = attempt.end = attempt.due
            attempt.fail("abandoned", f"never sent: {why}")
            finished()

        await drive_conversations(
            requests, self._config.point.concurrency, think, send, skip
        )
        return [a for a in attempts if a is not None]

    def cut_short(self) -> list[Attempt]:
        """The phase's attempts when it was stopped: those in flight become `cancelled`."""
        now = time.perf_counter()
        attempts = [a for a in self.sent if a is not None]
        for attempt in attempts:
            if not attempt.done and attempt.error_kind is None:
                attempt.fail("cancelled", "the load generator was stopped before the response")
                attempt.end = attempt.end or now
        return attempts


async def _unless_stopped(
    phase: _Phase, run: Coroutine[Any, Any, list[Attempt]], stop: asyncio.Event | None
) -> tuple[list[Attempt], bool]:
    """The phase's attempts, and whether `stop` was set before it finished."""
    task = asyncio.ensure_future(run)
    if stop is None:
        return await task, False
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        stopped.cancel()
        return task.result(), False
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return phase.cut_short(), True


async def run_load(
    config: RunConfig,
    progress: ProgressCallback | None = None,
    stop: asyncio.Event | None = None,
    trace: Trace | None = None,
) -> LoadgenResult:
    """Carry out the run and return its result; request failures are records, not raised.
    A trace workload replays `trace` (`trace_source.replayed_trace`).

    A failed counter read is reported in the document (`counters.error`), not raised, so the
    requests already measured are kept. When `stop` is set the run ends there: the document
    holds every request sent so far and says it is partial.
    """
    sequence = build_sequence(
        config.workload, config.point, config.seed, config.warmup, config.tokens, trace
    )
    schedule = measured_schedule(
        sequence.measured,
        config.point,
        config.seed,
        config.time_scale,
        capped=config.workload.trace is not None,
    )
    counters = make_counter_source(config.metrics)
    report = CounterReport(source=config.metrics.kind if config.metrics else None)
    origin, started = time.perf_counter(), datetime.now(UTC)
    async with Client(
        config.connection, config.request_timeout_seconds, config.connect_timeout_seconds
    ) as client:
        phase = _Phase(config, client, progress, sequence.groups)
        warm_schedule = warmup_schedule(config.point, schedule.kind == "scheduled")
        warm, stopped = await _unless_stopped(
            phase, phase.prepare("warmup", sequence.warmup, warm_schedule), stop
        )
        partial = "stopped (SIGTERM) during the warm-up" if stopped else None
        window = phase.prepare("measured", sequence.measured, schedule)
        before = None if stopped else await _read(counters, report)
        monitor = LoopMonitor()
        monitor.start()
        with _no_gc_pauses():
            began = time.perf_counter()
            measured: list[Attempt] = []
            if stopped:
                window.close()
            else:
                measured, stopped = await _unless_stopped(phase, window, stop)
                if stopped:
                    partial = (
                        f"stopped (SIGTERM) in the measured window after {len(measured)} of "
                        f"{len(sequence.measured)} requests were sent"
                    )
        window_start = min((a.start for a in measured), default=began)
        window_end = max((a.end for a in measured), default=window_start)
        lateness = _lateness_p99(measured) if schedule.offsets is not None else None
        succeeded = sum(1 for a in measured if a.error_kind is None)
        health = await monitor.stop(config.lag_threshold, lateness, succeeded)
        after = await _read(counters, report) if before is not None else None
    records = [to_record(a, origin) for a in (*warm, *measured)]
    if before is not None and after is not None:
        report.pods, notes = pod_deltas(before, after)
        report.notes.extend(notes)
        if isinstance(config.metrics, DirectMetrics) and config.metrics.worker_ids:
            report.pods, notes = attribute_responses(
                report.pods, before, records, config.metrics.worker_ids
            )
            report.notes.extend(notes)
    if counters is not None:
        report.notes.extend(counters.notes)
    time_scale = _time_scale(records, config)
    scaled_by = config.time_scale if time_scale is None and config.time_scale > 0 else None
    summary = summarize_records(
        records, report.pods, window_end - window_start, time_scale, scaled_by, config.slo
    )
    return LoadgenResult(
        conditions=conditions_of(
            config, sequence, schedule, time_scale, event_loop_name(), phase.router.owners
        ),
        window=Window(
            started_at=started + timedelta(seconds=window_start - origin),
            finished_at=started + timedelta(seconds=window_end - origin),
            wall_seconds=round(window_end - window_start, 6),
            start=round(window_start - origin, 6),
            end=round(window_end - origin, 6),
        ),
        summary=summary,
        client=health,
        counters=report,
        partial=partial,
        warnings=[
            *([f"partial: {partial}"] if partial else []),
            *([f"counters not read: {report.error}"] if report.error else []),
            *warnings(summary, health.reasons, config.time_scale, _observed_scale(records)),
        ],
        requests=RequestColumns.from_records(records),
        config=config,
    )


@contextmanager
def _no_gc_pauses() -> Iterator[None]:
    """No cyclic-GC pass inside the measured window: a full pass over the run's objects
    stalls the loop for milliseconds, and that stall would land in some request's TTFT.
    Objects that exist before the window are frozen out of later passes; the window itself
    creates few cycles, collected right after it."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def _read(
    source: CounterSource | None, report: CounterReport
) -> dict[str, PodCounters] | None:
    if source is None or report.error is not None:
        return None
    try:
        return await source.snapshot(time.time())
    except Exception as err:  # the measured requests stay valid without counters
        report.error = f"{type(err).__name__}: {err}"
        return None


def _lateness_p99(attempts: list[Attempt]) -> float:
    late = sorted(max(0.0, a.start - a.due) for a in attempts)
    return round(percentile(late, 99), 6) if late else 0.0


def _observed_scale(records: list[RequestRecord]) -> float | None:
    for record in records:
        if record.sim is not None and record.sim.time_scale is not None:
            return record.sim.time_scale
    return None


def _time_scale(records: list[RequestRecord], config: RunConfig) -> float | None:
    """The simulator's own report of its time scale wins over the configured one."""
    observed = _observed_scale(records)
    if observed is not None:
        return observed
    return config.time_scale if any(r.sim for r in records) else None


def conditions_of(
    config: RunConfig,
    sequence: Sequence,
    schedule: Schedule,
    time_scale: float | None,
    loop: str,
    owners: dict[int, str],
    clock: Literal["wall", "virtual"] = "wall",
) -> Conditions:
    """What the run sent and how, for its document (the HTTP and the virtual path alike)."""
    target = config.target
    return Conditions(
        clock=clock,
        run_id=config.run_id,
        model=config.model,
        api=config.api,
        workload=config.workload.kind,
        prompt_format=config.workload.prompt_format,
        point=config.point,
        concurrency=config.point.concurrency,
        request_rate=config.point.request_rate,
        seed=config.seed,
        digest=sequence.digest,
        warmup_requests=len(sequence.warmup),
        measured_requests=len(sequence.measured),
        schedule=schedule.kind,
        target=target.url if isinstance(target, UrlTarget) else "prefix-affinity",
        endpoints=sorted(target.pods) if isinstance(target, PrefixAffinityTarget) else [],
        groups_by_pod={
            pod: sorted(g for g, owner in owners.items() if owner == pod)
            for pod in sorted(set(owners.values()))
        },
        connection=config.connection,
        metrics_source=config.metrics.kind if config.metrics else None,
        time_scale=time_scale,
        trace=config.trace,
        versions=versions(loop),
    )
