"""What the runner tells its observer over a small experiment, on a clock the test sets: run 0
recorded at its first attempt, run 1 failed for good after a retry."""

from dataclasses import dataclass
from pathlib import Path

import yaml

from kvbench.api import (
    AttemptFailure,
    ExperimentPhase,
    ExperimentProgress,
    ExperimentStatus,
    LastRun,
    RunRecord,
    RunSummary,
    parse_experiment,
)
from kvbench.operator.metrics import ExperimentMetrics
from kvbench.plan import Plan, PlannedRun, plan_experiment
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.states import RunStage, RunState

ROOT = Path(__file__).resolve().parents[3]
HIT_RATE, TOKEN_HIT_RATE, TTFT_P50, TTFT_P99 = 0.75, 0.62, 0.125, 0.5


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def two_run_plan(name: str = "exp") -> Plan:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["workload"]["sharedPrefix"]["prefixes"] = [2]
    document["spec"]["load"].update(concurrency=[4], trials=2)
    return plan_experiment(parse_experiment(document))


def state(run: PlannedRun, stage: RunStage, attempt: int = 1) -> RunState:
    names = ChildNames(experiment="exp", index=run.index, attempt=attempt)
    return RunState(index=run.index, id=run.id, stage=stage, attempt=attempt, names=names)


def record(run: PlannedRun) -> RunRecord:
    summary = RunSummary(
        requests=40, request_hit_rate=HIT_RATE, token_hit_rate=TOKEN_HIT_RATE,
        ttft_p50=TTFT_P50, ttft_p99=TTFT_P99,
    )  # fmt: skip
    return RunRecord(
        id=run.id, index=run.index, arm=run.arm, variant=run.variant, point=run.point,
        trial=run.trial, seed=run.seed, summary=summary,
    )  # fmt: skip


def status(plan: Plan, phase: ExperimentPhase, done: int, failed: int = 0) -> ExperimentStatus:
    last = LastRun(
        id=plan.runs[0].id, index=0, attempt=1, request_hit_rate=HIT_RATE,
        token_hit_rate=TOKEN_HIT_RATE, ttft_p50=TTFT_P50, ttft_p99=TTFT_P99,
    )  # fmt: skip
    total = len(plan.runs)
    progress = ExperimentProgress(done=done, failed=failed, total=total, display=f"{done}/{total}")
    return ExperimentStatus(phase=phase, progress=progress, last_run=last if done else None)


def feed(observer: ExperimentMetrics, clock: Clock, plan: Plan) -> None:
    """Run 0: workers ready after 12 s, recorded 40 s after its start. Run 1: its first
    attempt's workers never get ready (5 s), its second's take 8 s, then the load fails: the
    run fails for good 30 s after its first start."""
    first, second = plan.runs
    observer.started(plan, 0)
    observer.status(status(plan, ExperimentPhase.RUNNING, 0))
    observer.stage(first, state(first, RunStage.WORKERS_STARTING))
    clock.now += 12
    observer.stage(first, state(first, RunStage.WORKERS_READY))
    for stage in (RunStage.ARM_OPEN, RunStage.LOAD_RUNNING, RunStage.COLLECTING):
        observer.stage(first, state(first, stage))
    clock.now += 28
    observer.stage(first, state(first, RunStage.RECORDED))
    observer.recorded(first, record(first))
    observer.status(status(plan, ExperimentPhase.RUNNING, 1))

    observer.stage(second, state(second, RunStage.WORKERS_STARTING))
    clock.now += 5
    failure = AttemptFailure(attempt=1, reason="WorkersNotReady", message="gpu-0 not ready")
    observer.attempt_failed(second, failure, retrying=True)
    observer.stage(second, state(second, RunStage.PENDING, attempt=2))
    clock.now += 2
    observer.stage(second, state(second, RunStage.WORKERS_STARTING, attempt=2))
    clock.now += 8
    observer.stage(second, state(second, RunStage.WORKERS_READY, attempt=2))
    clock.now += 15
    failure = AttemptFailure(attempt=2, reason="LoadFailed", message="exit code 1")
    observer.attempt_failed(second, failure, retrying=False)
    observer.stage(second, state(second, RunStage.FAILED, attempt=2))
    observer.status(status(plan, ExperimentPhase.FAILED, 2, failed=1))
