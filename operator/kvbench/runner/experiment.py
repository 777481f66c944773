"""The experiment runner: sequences every run of the plan over a Cluster, checkpointing each.

Per run: fresh workers (or a cache reset), the arm in front of them, warm-up and measured load,
counters, then the record is written. Runs already in the results directory are skipped, so an
interrupted experiment resumes where it stopped and never records a run twice.
"""

from datetime import UTC, datetime
from typing import Protocol

from kvbench.api import BenchmarkExperiment, PodResult, RunRecord
from kvbench.plan import PlannedRun, plan_experiment
from kvbench.runner.aggregate import aggregate
from kvbench.runner.cluster.base import Cluster, LoadOutcome, Target, WorkerInfo
from kvbench.runner.store import ResultsStore

__all__ = ["ExperimentRunner", "Progress"]


class Progress(Protocol):
    """Where the runner reports what it does (a terminal bar, the resource's status, ...)."""

    def started(self, total: int, done: int) -> None: ...

    def run_started(self, run: PlannedRun) -> None: ...

    def run_finished(self, run: PlannedRun, record: RunRecord) -> None: ...


def _pods(outcome: LoadOutcome, workers: list[WorkerInfo]) -> list[PodResult]:
    """The load generator's counter deltas, completed with what the cluster knows of each pod."""
    by_name = {w.name: w for w in workers}
    pods = []
    for pod in outcome.pods:
        worker = by_name.get(pod.pod)
        if worker is not None:
            pod = pod.model_copy(
                update={
                    "node": pod.node or worker.node,
                    "kv_cache_tokens": pod.kv_cache_tokens or worker.kv_cache_tokens,
                    "startup_seconds": pod.startup_seconds or worker.startup_seconds,
                    "address": pod.address or worker.base_url,
                }
            )
        pods.append(pod)
    return pods


class ExperimentRunner:
    """Runs one experiment's pending runs on a cluster, into a results directory."""

    def __init__(
        self,
        experiment: BenchmarkExperiment,
        cluster: Cluster,
        store: ResultsStore,
        progress: Progress | None = None,
    ) -> None:
        self.experiment = experiment
        self.cluster = cluster
        self.store = store
        self.progress = progress

    def pending(self) -> list[PlannedRun]:
        """Runs of the plan not yet recorded in the results directory."""
        done = self.store.done()
        return [r for r in plan_experiment(self.experiment).runs if r.id not in done]

    async def run(self) -> list[RunRecord]:
        """Run every pending run; the cluster is closed whatever happens."""
        spec = self.experiment.spec
        problems = self.cluster.problems(spec)
        if problems:
            raise ValueError("this back end cannot run the experiment:\n  " + "\n  ".join(problems))
        self.store.open(self.experiment)
        plan = plan_experiment(self.experiment)
        pending = self.pending()
        if self.progress:
            self.progress.started(len(plan.runs), len(plan.runs) - len(pending))
        engines = spec.engines()
        arms = {arm.name: arm for arm in spec.routing}
        workers: list[WorkerInfo] = []
        target: Target | None = None
        started: tuple[str, str] | None = None
        try:
            for run in pending:
                if self.progress:
                    self.progress.run_started(run)
                arm = arms[run.arm]
                wanted = (run.variant, arm.name if arm.worker_kind != "vllm" else "vllm")
                if spec.freshness == "restart" or wanted != started:
                    await self.cluster.close_arm()
                    target = None
                    workers = await self.cluster.start_workers(
                        spec, run.variant, engines[run.variant], arm
                    )
                    started = wanted
                elif spec.freshness == "reset-cache":
                    await self.cluster.reset_caches(workers)
                if target is None or target.arm != run.arm:
                    await self.cluster.close_arm()
                    target = await self.cluster.open_arm(spec, arm, workers)
                record = await self._measure(run, target, workers)
                if self.progress:
                    self.progress.run_finished(run, record)
        finally:
            await self.cluster.close()
        return self.store.records()

    async def _tail(self, worker: WorkerInfo, lines: int = 15) -> str:
        """The end of a worker's log, for a failed run's error (never raises itself)."""
        try:
            text = await self.cluster.worker_logs(worker)
        except Exception as err:
            return f"(log not available: {err})"
        return "\n".join(text.splitlines()[-lines:])

    async def _measure(
        self, run: PlannedRun, target: Target, workers: list[WorkerInfo]
    ) -> RunRecord:
        started = datetime.now(UTC)
        try:
            outcome = await self.cluster.run_load(self.experiment.spec, run, target, workers)
        except Exception as err:
            for worker in workers:
                err.add_note(
                    f"--- log of {worker.name} (last lines) ---\n{await self._tail(worker)}"
                )
            raise
        raw = self.store.save_raw(run.id, outcome.raw_document)
        record = RunRecord(
            id=run.id,
            index=run.index,
            arm=run.arm,
            variant=run.variant,
            point=run.point,
            trial=run.trial,
            seed=run.seed,
            digest=outcome.digest,
            started_at=started,
            finished_at=datetime.now(UTC),
            pods=_pods(outcome, workers),
            summary=outcome.summary,
            raw_results=str(raw.relative_to(self.store.root)),
        )
        self.store.save_run(record)
        self.store.save_aggregate(aggregate(self.experiment.spec, self.store.records()))
        return record
