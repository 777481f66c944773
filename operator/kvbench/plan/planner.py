"""Spec -> ordered runs: variant x routing arm x workload point x trial.

The request sequence of a run depends only on (seed, point, trial) and a trace workload's
trace, never on the arm or the variant, so every arm and variant is measured on byte-identical
traffic. A trace workload is planned with its trace's `TraceInfo` (its rows are the requests).
"""

import hashlib
from itertools import product

from pydantic import BaseModel, ConfigDict, Field

from kvbench.api import BenchmarkExperiment, ExperimentSpec, Point
from kvbench.api.workload import TraceInfo
from kvbench.plan.estimate import DurationModel, estimate_local_seconds, estimate_run_seconds

__all__ = ["Plan", "PlannedRun", "plan_experiment", "points_of", "sequence_seed"]


class PlannedRun(BaseModel):
    """One run of the plan."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(..., ge=0)
    id: str
    variant: str
    arm: str
    arm_kind: str
    point: Point
    trial: int = Field(..., ge=1)
    seed: int = Field(..., description="Seed of this run's request sequence")
    warmup_requests: int
    measured_requests: int
    estimated_seconds: float = Field(..., description="On a GPU cluster, roughly")
    estimated_local_seconds: float = Field(..., description="With `kvbench run`, roughly")


class Plan(BaseModel):
    """All runs of an experiment, in the order they execute."""

    experiment: str
    runs: list[PlannedRun]

    @property
    def total_requests(self) -> int:
        return sum(r.warmup_requests + r.measured_requests for r in self.runs)

    @property
    def estimated_seconds(self) -> float:
        return sum(r.estimated_seconds for r in self.runs)

    @property
    def estimated_local_seconds(self) -> float:
        return sum(r.estimated_local_seconds for r in self.runs)


def points_of(spec: ExperimentSpec) -> list[Point]:
    """The workload points in order: prefixes (outer) x request rate x concurrency (inner); a
    trace's: one per concurrency."""
    rates: list[float | None] = list(spec.load.request_rates or [None])
    prefixes: list[int | None] = (
        list(spec.workload.shared_prefix.prefixes) if spec.workload.shared_prefix else [None]
    )
    return [
        Point(prefixes=p, request_rate=r, concurrency=c)
        for p, r, c in product(prefixes, rates, spec.load.concurrency)
    ]


def sequence_seed(seed: int, point: Point, trial: int) -> int:
    """The seed of one (point, trial)'s request sequence, the same in every arm and variant."""
    digest = hashlib.sha256(f"kvbench/{seed}/{point.key}/t{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _requests(spec: ExperimentSpec, point: Point, trace: TraceInfo | None) -> tuple[int, int]:
    """(warm-up, measured) requests of a point (a trace's: its first rows, then the rest)."""
    workload, warmup = spec.workload, spec.load.warmup
    if workload.trace is not None:
        if trace is None:
            raise ValueError("a trace workload is planned with its trace: read it first")
        return warmup.requests, max(0, trace.rows - warmup.requests)
    if workload.shared_prefix is not None:
        assert point.prefixes is not None
        return (
            point.prefixes * warmup.requests_per_prefix,
            workload.shared_prefix.requests_for(point.prefixes),
        )
    if workload.random is not None:
        return warmup.requests, workload.random.requests_for(point.concurrency)
    if workload.conversation is not None:
        return warmup.requests, workload.conversation.requests
    assert workload.interference is not None
    return warmup.requests, 1 + workload.interference.prompts


def plan_experiment(
    experiment: BenchmarkExperiment,
    durations: DurationModel | None = None,
    trace: TraceInfo | None = None,
) -> Plan:
    """Expand an experiment into its runs; the same spec (and trace) always gives the same
    plan."""
    spec = experiment.spec
    durations = durations or DurationModel()
    runs: list[PlannedRun] = []
    for variant, arm, point, trial in product(
        spec.variant_names(), spec.routing, points_of(spec), range(1, spec.load.trials + 1)
    ):
        warmup, measured = _requests(spec, point, trace)
        runs.append(
            PlannedRun(
                index=len(runs),
                id=f"{variant}.{arm.name}.{point.key}.t{trial}",
                variant=variant,
                arm=arm.name,
                arm_kind=arm.kind,
                point=point,
                trial=trial,
                seed=sequence_seed(spec.load.seed, point, trial),
                warmup_requests=warmup,
                measured_requests=measured,
                estimated_seconds=estimate_run_seconds(
                    spec, point, warmup + measured, durations, trace
                ),
                estimated_local_seconds=estimate_local_seconds(
                    spec.for_arm(arm), point, warmup + measured, durations, trace
                ),
            )
        )
    return Plan(experiment=experiment.metadata.name, runs=runs)
