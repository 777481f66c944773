"""One run in virtual time: the load generator's sequence, pacing and routing, the workers'
counters before and after the measured window, and the same result document `kvbench
loadgen` writes, with the simulated clock as the client's clock.

Everything the HTTP path decides from the seed is decided the same way here: the request
sequence (`build_sequence`, so the digest is the same), the schedule, prefix affinity's
placement (`make_router`) and the Service's choice of a worker per new connection (a
`random.Random` seeded as the local Service stand-in's, drawing once per request in the
order requests are sent). Timing is the simulator's own: the client adds only its time per
send (`SEND_SECONDS`), so a request's TTFT, ITL and end-to-end latency are the engine's,
frontend latency included.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from kvbench.api.units import parse_duration
from kvbench.loadgen.arrivals import Schedule, measured_schedule, warmup_schedule
from kvbench.loadgen.columns import RequestColumns
from kvbench.loadgen.config import PrefixAffinityTarget, RunConfig, UrlTarget
from kvbench.loadgen.counters import PodCounters, pod_deltas
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.measure import conditions_of
from kvbench.loadgen.records import RequestRecord, request_identity, sim_timing
from kvbench.loadgen.results import CounterReport, LoadgenResult, Window
from kvbench.loadgen.routing import make_router
from kvbench.loadgen.summary import summarize_records, warnings
from kvbench.loadgen.workload import Request, build_sequence
from kvbench.loadgen.workload.mooncake import Trace
from kvbench.sim.request import FinishReason, SimRequest
from kvbench.virtual.clients import Done, drive, drive_conversations
from kvbench.virtual.timeline import Timeline
from kvbench.virtual.workers import VirtualWorker

__all__ = ["SEND_SECONDS", "VIRTUAL_CLOCK", "run_virtual_load"]

SEND_SECONDS = 0.001
"""The modelled client's time per request sent: it sends one at a time, so requests due at
the same instant (a closed loop's start, two answers in one step) go out this far apart, as
the HTTP client's do. Not zero because a burst that reaches an idle engine at one instant
shares one prefill step, one spread over even a fraction of a millisecond does not, and a
run's TTFT tail follows that split. 1 ms is what `kvbench loadgen` took per request beside six
`kvbench sim` servers on this project's 2-core machine at time scale 1 (the spacing of a
burst's sends in its records); alone on a core it takes about 0.2 ms."""

VIRTUAL_CLOCK = "virtual (discrete-event, no sockets, no wall clock)"
"""The event loop a virtual run's conditions name: nothing ran on one."""


def _r(x: float) -> float:
    return round(x, 6)


class _Run:
    """One phase after another on one timeline, keeping a record of every request."""

    def __init__(
        self,
        config: RunConfig,
        workers: dict[str, VirtualWorker],
        service_seed: str | None,
        groups: int | None,
        stepwise: bool,
    ) -> None:
        self.config = config
        self.workers = workers
        self.names = list(workers)
        self.router = make_router(config.target, config.path, groups)
        self.service = (
            random.Random(service_seed) if isinstance(config.target, UrlTarget) else None
        )
        if self.service is not None:
            if service_seed is None:
                raise ValueError("a Service arm in virtual time needs its balancer's seed")
            # the stand-in's first connection is the back end's check that it listens: it
            # draws a worker for it too, before any request
            self.service.choice(self.names)
        self.details = {n: w.config.enable_prompt_tokens_details for n, w in workers.items()}
        start = max((w.engine.core.clock for w in workers.values()), default=0.0)
        self.timeline = Timeline([w.engine.core for w in workers.values()], start, stepwise)
        self.origin = start
        self.records: dict[tuple[str, int], RequestRecord] = {}
        self._client_free = start

    def send(
        self,
        request: Request,
        due: float,
        chat: list[tuple[str, str]] | None,
        done: Done,
    ) -> None:
        """Hand the request to the client, which sends one request at a time: one due while
        it is busy goes out when it is free (`SEND_SECONDS` after the previous send)."""
        now = self.timeline.now
        if now < self._client_free:
            self.timeline.at(self._client_free, lambda _t: self.send(request, due, chat, done))
            return
        self._client_free = now + SEND_SECONDS
        route = self.router.route(request)
        name = self.service.choice(self.names) if self.service is not None else route.endpoint
        worker = self.workers[name]
        try:
            sim = worker.admit(request, chat)
        except ValueError as err:
            self._failed(request, route.endpoint, due, now, 400, "http", str(err))
            self.timeline.at(now, lambda t: done(t, None))
            return

        def finished(r: SimRequest) -> None:
            record = self._record(request, route.endpoint, due, r, worker)
            self.records[(request.phase, request.index)] = record
            # the answer's text only where a later turn resends it (as the client keeps it)
            answer = None if record.error_kind else (worker.answer_text(r) if chat else "")
            done(r.finish_time or now, answer)

        sim.notify = finished
        core = worker.engine.core
        sim.arrival_time = now
        sim.engine_arrival_time = now + core.cost.frontend_latency(sim.num_prompt_tokens)
        core.add_request(sim)

    def skip(self, request: Request, now: float, why: str) -> None:
        self._failed(request, "", now, now, None, "abandoned", f"never sent: {why}")

    def _failed(
        self,
        request: Request,
        endpoint: str,
        due: float,
        now: float,
        status: int | None,
        kind: str,
        error: str,
    ) -> None:
        self.records[(request.phase, request.index)] = RequestRecord(
            **request_identity(request),
            endpoint=endpoint,
            due=_r(due - self.origin),
            start=_r(now - self.origin),
            end=_r(now - self.origin),
            output_tokens=0,
            status=status,
            error_kind=kind,
            error=error,
        )

    def _record(
        self, request: Request, endpoint: str, due: float, r: SimRequest, worker: VirtualWorker
    ) -> RequestRecord:
        """What the HTTP client would have recorded, with no time spent outside the engine."""
        start, end = r.arrival_time, r.finish_time or r.arrival_time
        times = r.token_times
        failed = r.finish_reason is FinishReason.ABORT
        cached = max(r.num_cached_tokens, 0)
        sim = sim_timing(  # the server's `kvbench` extension, read as the client reads it
            {
                "worker": worker.name,
                "arrival_time": r.arrival_time,
                "first_scheduled_time": r.first_scheduled_time,
                "first_token_time": r.first_token_time,
                "token_times": times,
                "finish_time": r.finish_time,
                "num_preemptions": r.num_preemptions,
                "cached_tokens": cached,
            }
        )
        return RequestRecord(
            **request_identity(request),
            endpoint=endpoint,
            due=_r(due - self.origin),
            start=_r(start - self.origin),
            end=_r(end - self.origin),
            ttft=_r(times[0] - start) if times else None,
            e2e=None if failed else _r(end - start),
            itl=sim.itl,
            prompt_tokens=r.num_prompt_tokens,
            output_tokens=r.num_output_tokens,
            cached_tokens=cached if self.details[worker.name] else None,
            status=200,
            error_kind="stream" if failed else None,
            error=(
                "the engine dropped the request: it can never fit the KV cache" if failed else None
            ),
            sim=None if failed else sim,
        )

    def phase(self, requests: list[Request], schedule: Schedule) -> None:
        """Carry out one phase's requests to the end."""
        conversation = self.config.workload.conversation
        if conversation is not None:
            think = parse_duration(conversation.think_time)
            drive_conversations(
                self.timeline,
                requests,
                self.config.point.concurrency,
                think,
                self.send,
                self.skip,
            )
        else:
            drive(self.timeline, requests, schedule, self.send)

    def counters(self) -> dict[str, PodCounters]:
        return {name: worker.counters() for name, worker in self.workers.items()}


def run_virtual_load(
    config: RunConfig,
    workers: dict[str, VirtualWorker],
    service_seed: str | None = None,
    trace: Trace | None = None,
    stepwise: bool = False,
) -> LoadgenResult:
    """Carry out `config`'s run against `workers` in virtual time. A Service target (a URL)
    spreads requests over `workers` with the balancer seeded by `service_seed`; a
    prefix-affinity target names the workers itself. `stepwise`: every engine step on its
    own (`Timeline`), the reference the faster default must equal."""
    sequence = build_sequence(
        config.workload, config.point, config.seed, config.warmup, config.tokens, trace
    )
    schedule = measured_schedule(
        sequence.measured, config.point, config.seed, 1.0, capped=config.workload.trace is not None
    )
    if isinstance(config.target, PrefixAffinityTarget) and set(config.target.pods) - set(workers):
        raise ValueError(f"prefix affinity names unknown workers: {sorted(config.target.pods)}")
    run = _Run(config, workers, service_seed, sequence.groups, stepwise)
    computed_at = datetime.now(UTC)
    run.phase(sequence.warmup, warmup_schedule(config.point, schedule.kind == "scheduled"))
    before = run.counters()
    run.timeline.now = max(run.timeline.now, *(w.engine.core.clock for w in workers.values()))
    run.phase(sequence.measured, schedule)
    after = run.counters()
    records = [
        run.records[(r.phase, r.index)] for r in (*sequence.warmup, *sequence.measured)
    ]
    measured = [r for r in records if r.phase == "measured"]
    window_start = min((r.start for r in measured), default=0.0)
    window_end = max((r.end for r in measured), default=window_start)
    report = CounterReport(source="direct")
    report.pods, notes = pod_deltas(before, after)
    report.notes.extend(notes)
    summary = summarize_records(
        records, report.pods, window_end - window_start, 1.0, None, config.slo
    )
    health = ClientHealth()
    conditions = conditions_of(
        config, sequence, schedule, 1.0, VIRTUAL_CLOCK, run.router.owners, "virtual"
    )
    conditions.client_send_seconds = SEND_SECONDS
    return LoadgenResult(
        conditions=conditions,
        window=Window(
            started_at=computed_at + timedelta(seconds=window_start),
            finished_at=computed_at + timedelta(seconds=window_end),
            wall_seconds=round(window_end - window_start, 6),
            start=window_start,
            end=window_end,
        ),
        summary=summary,
        client=health,
        counters=report,
        warnings=warnings(summary, [], 1.0, None),
        requests=RequestColumns.from_records(records),
        config=config,
    )
