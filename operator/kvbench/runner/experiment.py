"""The experiment runner: every planned run through its persisted state machine, on a Cluster.

Per run: fresh workers (or a cache reset), the arm in front of them, the load generator
(warm-up, then the measured window), a check that no worker restarted (and that a kv_aware
router heard every serving worker's KV events), the record. Each
state is written to the store before its side effect, so a runner stopped anywhere (cancelled,
crashed, killed) is continued by the next one from the store: a recorded run is never
repeated, a load generator still running is adopted, one that finished unwatched is collected,
and only an attempt with nothing durable is run again.

A failed attempt is data: it is kept with its reason and the run is tried again on fresh
workers within `execution.retries`; then the run is recorded as failed and the others go on.
Only a spec the back end cannot run stops the experiment at once.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

from kvbench.api import (
    AttemptFailure,
    BenchmarkExperiment,
    ExperimentSpec,
    ExperimentStatus,
    RoutingArm,
    RunRecord,
)
from kvbench.loadgen.errors import commonest_error
from kvbench.loadgen.results import read_result
from kvbench.loadgen.workload.mooncake import Trace
from kvbench.plan import Plan, PlannedRun, plan_experiment
from kvbench.plan.trace import trace_problems
from kvbench.runner.aggregate import aggregate
from kvbench.runner.cluster.base import ArmEndpoint, ChildNames, Cluster, WorkerInfo
from kvbench.runner.cluster.kv_events import silent_publishers
from kvbench.runner.failures import (
    LoadStopped,
    NoCapacity,
    NoKvEvents,
    NoResponses,
    RunFailure,
    RunTimeout,
    SpecNotRunnable,
    WorkersDisturbed,
)
from kvbench.runner.mapping import build_run_config, failed_record, run_record
from kvbench.runner.states import RunStage, RunState
from kvbench.runner.status import experiment_status
from kvbench.runner.stores.base import RunStore

__all__ = ["CAPACITY_POLL_SECONDS", "ExperimentResult", "ExperimentRunner", "RunObserver"]

CAPACITY_POLL_SECONDS = 5.0
"""How often an experiment waiting for GPUs asks again (and republishes its status)."""


class RunObserver(Protocol):
    """Where the runner reports what it does (a terminal, the resource's status and events)."""

    def started(self, plan: Plan, done: int) -> None: ...

    def stage(self, run: PlannedRun, state: RunState) -> None: ...

    def recorded(self, run: PlannedRun, record: RunRecord) -> None: ...

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None: ...

    def status(self, status: ExperimentStatus) -> None: ...


@dataclass(frozen=True)
class ExperimentResult:
    """Every run's record once the experiment ended."""

    records: list[RunRecord]

    @property
    def failed(self) -> list[RunRecord]:
        """The runs whose every attempt failed."""
        return [r for r in self.records if r.error is not None]


_BEFORE_LOAD = (
    RunStage.WORKERS_STARTING,
    RunStage.WORKERS_READY,
    RunStage.ARM_OPEN,
    RunStage.LOAD_RUNNING,
)


def _now() -> datetime:
    return datetime.now(UTC)


class ExperimentRunner:
    """Runs one experiment's unfinished runs on a cluster, into a results store.

    `hold` is a fault-injection point for tests: called with every state the runner has
    written, and when it answers True the runner waits there forever (until it is killed or
    cancelled), so a test can stop it at exactly that step. A trace workload's `trace` is
    read by the caller, where it is (a file for `kvbench run`, a ConfigMap for the operator).
    """

    def __init__(
        self,
        experiment: BenchmarkExperiment,
        cluster: Cluster,
        store: RunStore,
        observer: RunObserver | None = None,
        hold: Callable[[RunState], bool] | None = None,
        trace: Trace | None = None,
    ) -> None:
        self.experiment = experiment
        self.spec = experiment.spec
        self.cluster = cluster
        self.store = store
        self.observer = observer
        self.trace = trace
        self.plan = plan_experiment(experiment, trace=trace.info if trace else None)
        self.hold = hold
        self.started_at: datetime | None = None
        self._workers: list[WorkerInfo] = []
        self._workers_for: tuple[str, str, float] | None = None
        self._endpoint: ArmEndpoint | None = None
        self._arm_names: ChildNames | None = None
        """The attempt whose names the open arm's children carry: a router kept across runs
        (freshness none or reset-cache) is found by them, not by the current run's."""
        self._current: RunState | None = None
        self._waiting: str | None = None
        """What the experiment waits for before its next workers can start (their GPUs)."""

    async def run(self, on_cancel: Literal["teardown", "detach"] = "teardown") -> ExperimentResult:
        """Carry out every unfinished run, then tear the children down.

        Cancelled, it tears down too (a user stopped the experiment), unless `on_cancel` is
        `detach` (the host is going away: children keep running for the next runner).
        """
        problems = self.cluster.problems(self.spec)
        if self.trace is not None:
            problems += trace_problems(self.spec, self.trace)
        if problems:
            raise SpecNotRunnable(problems)
        await asyncio.to_thread(self.store.open, self.experiment)
        self.started_at = _now()
        states = self.store.states()
        done = sum(1 for s in states.values() if s.stage.finished)
        if self.observer:
            self.observer.started(self.plan, done)
        await self.cluster.recover(self._adoptable(states))
        try:
            for run in self.plan.runs:
                state = states.get(run.index)
                if state is not None and state.stage.finished:
                    continue
                await self._run(run, state or self._new_state(run))
        except (asyncio.CancelledError, KeyboardInterrupt):
            if on_cancel == "detach":
                await self.cluster.detach()
            else:
                self._interrupted()
                await self.cluster.teardown(self.spec.cleanup)
            raise
        except BaseException:
            await self.cluster.teardown(self.spec.cleanup)
            raise
        await self.cluster.teardown(self.spec.cleanup)
        await asyncio.to_thread(self._publish, True)
        return ExperimentResult(self.store.records())

    def _new_state(self, run: PlannedRun) -> RunState:
        names = ChildNames(experiment=self.experiment.metadata.name, index=run.index, attempt=1)
        return RunState(index=run.index, id=run.id, names=names)

    @staticmethod
    def _adoptable(states: dict[int, RunState]) -> ChildNames | None:
        """The attempt whose load generator may be running (the runner is sequential, so
        there is at most one): started, or about to be when the runner stopped."""
        for state in states.values():
            if state.stage == RunStage.LOAD_RUNNING:
                return state.names
        return None

    async def _save(self, run: PlannedRun, state: RunState) -> RunState:
        """Persist the state, then tell the observer; in a thread, since a store or an
        observer may be an API server (it must not stall other experiments' event loop)."""

        def write() -> None:
            self.store.save_state(state)
            if self.observer:
                self.observer.stage(run, state)
            self._publish()

        self._current = state
        await asyncio.to_thread(write)
        return state

    async def _hold(self, state: RunState) -> None:
        if self.hold is not None and self.hold(state):
            await asyncio.Event().wait()

    def _interrupted(self) -> None:
        """A user stopped the run under way: its attempt is void, but not a failure."""
        state = self._current
        if state is None or state.stage.finished:
            return
        if state.load_started_at is not None and state.stage == RunStage.LOAD_RUNNING:
            self.store.save_state(state.next_attempt(None))
        elif state.stage in _BEFORE_LOAD:
            self.store.save_state(state.model_copy(update={"stage": RunStage.PENDING}))

    async def _run(self, run: PlannedRun, state: RunState) -> None:
        """Attempts of one run until one is recorded or the budget is spent."""
        while True:
            try:
                await self._attempt(run, state)
                return
            except RunFailure as failure:
                if failure.permanent:
                    raise
                state = await self._failed(run, self._current or state, failure)
            except Exception as err:
                failure = RunFailure(f"{type(err).__name__}: {err}")
                state = await self._failed(run, self._current or state, failure)
            if state.stage == RunStage.FAILED:
                return

    async def _failed(self, run: PlannedRun, state: RunState, failure: RunFailure) -> RunState:
        """Keep the failure; a fresh attempt within the budget, else the run's failed record."""
        detail = str(failure)
        if self._workers:
            detail += await self._log_tails()
        reason = AttemptFailure(
            attempt=state.attempt,
            reason=failure.reason,
            message=detail,
            raw_results=state.raw,
            partial=failure.partial,
        )
        self._forget_workers()
        await self.cluster.release_load(state.names, keep=self.spec.cleanup.keep_jobs)
        retrying = state.attempt <= self.spec.execution.retries
        if self.observer:
            self.observer.attempt_failed(run, reason, retrying)
        if retrying:
            return await self._save(run, state.next_attempt(reason))
        failed = state.model_copy(
            update={"stage": RunStage.FAILED, "failures": [*state.failures, reason]}
        )
        record = failed_record(run, failed, failure.reason, str(failure))
        await asyncio.to_thread(self.store.save_run, record)
        return await self._save(run, failed)

    async def _attempt(self, run: PlannedRun, state: RunState) -> None:
        self._current = state
        if state.stage == RunStage.LOAD_RUNNING and state.load_started_at is None:
            found = await self.cluster.load_state(state.names)
            if found.phase != "absent":  # started just before the runner stopped
                state = await self._save(run, state.model_copy(update={"load_started_at": _now()}))
        if state.stage == RunStage.LOAD_RUNNING and state.load_started_at is not None:
            self._workers, self._endpoint = state.workers, state.endpoint
            self._workers_for = self._worker_key(run, self._arm(run))
        elif state.stage != RunStage.COLLECTING:
            state = await self._prepare(run, state)
        if state.stage == RunStage.LOAD_RUNNING:
            state = await self._collect_load(run, state)
        await self._record(run, state)
        await self.cluster.release_load(state.names, keep=self.spec.cleanup.keep_jobs)

    def _arm(self, run: PlannedRun) -> RoutingArm:
        return next(a for a in self.spec.routing if a.name == run.arm)

    def _worker_key(self, run: PlannedRun, arm: RoutingArm) -> tuple[str, str, float]:
        """Runs that may share workers (freshness none/reset-cache): same variant, the same
        kind of workers (Dynamo's are per arm, its router mode is part of them) and, under
        the simulator, the same time scale."""
        kind = arm.name if arm.worker_kind != "vllm" else "vllm"
        simulated = self.cluster.uses_simulator(self.spec)
        return (run.variant, kind, self.spec.simulator.time_scale_of(arm) if simulated else 1.0)

    def _forget_workers(self) -> None:
        self._workers, self._workers_for, self._endpoint = [], None, None
        self._arm_names = None

    async def _prepare(self, run: PlannedRun, state: RunState) -> RunState:
        """Workers, arm and the load generator's start, each announced before it happens, on
        the spec as the arm sees it (`ExperimentSpec.for_arm`: its time scale)."""
        arm = self._arm(run)
        spec = self.spec.for_arm(arm)
        state = await self._save(run, state.model_copy(update={"stage": RunStage.WORKERS_STARTING}))
        await self._hold(state)
        key = self._worker_key(run, arm)
        if self.spec.freshness == "restart" or key != self._workers_for or not self._workers:
            self._forget_workers()
            await self.cluster.close_arm()
            self._workers = await self._start_workers_once_they_fit(spec, run, arm, state)
            self._workers_for = key
        elif self.spec.freshness == "reset-cache":
            await self.cluster.reset_caches(self._workers)
        state = await self._save(
            run,
            state.model_copy(update={"stage": RunStage.WORKERS_READY, "workers": self._workers}),
        )
        await self._hold(state)
        if self._endpoint is None or self._endpoint.arm != arm.name:
            await self.cluster.close_arm()
            self._endpoint = await self.cluster.open_arm(spec, arm, self._workers, state.names)
            self._arm_names = state.names
        state = await self._save(
            run, state.model_copy(update={"stage": RunStage.ARM_OPEN, "endpoint": self._endpoint})
        )
        await self._hold(state)
        config = build_run_config(
            spec,
            run,
            self._endpoint,
            self._workers,
            self.cluster.uses_simulator(self.spec),
            self.trace.info if self.trace else None,
        )
        state = await self._save(run, state.model_copy(update={"stage": RunStage.LOAD_RUNNING}))
        await self._hold(state)
        await self.cluster.start_load(spec, config, state.names)
        state = await self._save(run, state.model_copy(update={"load_started_at": _now()}))
        await self._hold(state)
        return state

    async def _start_workers_once_they_fit(
        self, spec: ExperimentSpec, run: PlannedRun, arm: RoutingArm, state: RunState
    ) -> list[WorkerInfo]:
        """Fresh workers; while the cluster has not the GPUs for them, the status says so
        (Pending, with the reason) and the question is asked again."""
        while True:
            try:
                return await self.cluster.start_workers(
                    spec, run.variant, spec.engines()[run.variant], arm, state.names
                )
            except NoCapacity as wait:
                self._waiting = str(wait)
                await asyncio.to_thread(self._publish)
                await asyncio.sleep(CAPACITY_POLL_SECONDS)
            finally:
                self._waiting = None

    async def _collect_load(self, run: PlannedRun, state: RunState) -> RunState:
        """Wait for the load (what is left of `timeouts.run`), read where it and the router
        ran, check the workers and what a kv_aware router heard from them, keep the document;
        a disturbed window, or a kv_aware one routed without a worker's KV events, is a failed
        attempt, its document kept as evidence."""
        assert state.load_started_at is not None
        elapsed = (_now() - state.load_started_at).total_seconds()
        remaining = max(0.0, self.spec.timeouts.run_seconds - elapsed)
        document = await self.cluster.wait_load(state.names, remaining)
        placement = await self.cluster.load_placement(self._arm(run), state.names)
        disturbed = await self.cluster.check_workers(state.workers)
        opened = self._arm_names or state.names
        kv_events = await self.cluster.check_arm(self._arm(run), state.workers, opened)
        raw = await asyncio.to_thread(self.store.save_raw, state.names, document)
        result = read_result(document)
        partial = result.partial
        if disturbed:
            self._current = state.model_copy(update={"raw": raw})
            raise WorkersDisturbed(disturbed)
        if partial is not None:
            self._current = state.model_copy(update={"raw": raw})
            late = (
                _now() - state.load_started_at
            ).total_seconds() >= self.spec.timeouts.run_seconds
            failure = RunTimeout if late else LoadStopped
            stopped = failure(f"the load generator {partial}; its partial result is kept")
            stopped.partial = True
            raise stopped
        summary = result.summary
        if summary.requests and summary.errors == summary.requests:
            self._current = state.model_copy(update={"raw": raw})
            common = commonest_error(result.records())
            assert common is not None  # every request failed
            raise NoResponses(
                f"every one of the {summary.requests} measured requests failed; commonest "
                f"error ({common.count} of {common.failed}): {common.message}"
            )
        silent = silent_publishers(kv_events, result) if kv_events is not None else []
        if silent:
            self._current = state.model_copy(update={"raw": raw, "kv_events": kv_events})
            raise NoKvEvents(silent, kv_events)
        state = await self._save(
            run,
            state.model_copy(
                update={
                    "stage": RunStage.COLLECTING,
                    "raw": raw,
                    "kv_events": kv_events,
                    "placement": placement,
                }
            ),
        )
        await self._hold(state)
        return state

    async def _record(self, run: PlannedRun, state: RunState) -> None:
        assert state.raw is not None
        result = read_result(await asyncio.to_thread(self.store.read_raw, state.raw))
        record = run_record(run, state, result, state.load_started_at, _now())

        def keep() -> None:
            self.store.save_run(record)
            self.store.save_aggregate(aggregate(self.spec, self.store.records()))

        await asyncio.to_thread(keep)
        state = await self._save(run, state.model_copy(update={"stage": RunStage.RECORDED}))
        if self.observer:
            self.observer.recorded(run, record)
        await self._hold(state)

    async def _log_tails(self, lines: int = 15) -> str:
        """The end of every worker's log, for a failed attempt (never raises itself)."""
        parts = []
        for worker in self._workers:
            try:
                text = await self.cluster.worker_logs(worker)
                tail = "\n".join(text.splitlines()[-lines:])
            except Exception as err:
                tail = f"(log not available: {err})"
            parts.append(f"\n--- log of {worker.name} (last lines) ---\n{tail}")
        return "".join(parts)

    def _publish(self, finished: bool = False) -> None:
        if self.observer:
            self.observer.status(
                experiment_status(
                    self.plan,
                    self.store,
                    self._current if not finished else None,
                    self.started_at,
                    _now() if finished else None,
                    self.experiment.metadata.generation,
                    waiting=self._waiting,
                )
            )
