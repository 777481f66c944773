"""Fit a timing profile's free constants to measured runs by replaying them in virtual time.

Four constants decide what the figures measure: `flops` prices a prefill (every scheduled
token through the weights), `attention_bandwidth` a decode step's KV reads (growing with the
batch's context), `step_overhead_s` every step (for one model the weights' read time is a
constant too, so `bandwidth` stays as it is: fitting both would fit one number twice), and
`frontend_s` every request before the engine. The search runs in log space around the pools'
own profile (least squares on log(predicted / measured), finite differences), with a weak
pull back to the starting point so a constant the figures do not pin stays where it was. Each
evaluation replays every run, so the number of replays is capped (`budget`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.optimize import least_squares

from kvbench.api import BenchmarkExperiment
from kvbench.plan import PlannedRun
from kvbench.predict.figures import FITTED, Figures
from kvbench.predict.measured import MeasuredRun
from kvbench.predict.replay import replay
from kvbench.sim.geometry import resolve_geometry
from kvbench.sim.timing import TimingProfile, default_profile_name, resolve_profile

__all__ = [
    "FREE",
    "SHARED_GPU_FREE",
    "FitResult",
    "ParallelReplayer",
    "Replayer",
    "base_profile",
    "fit_profile",
    "replay_serial",
    "with_constants",
]

FREE: dict[str, str] = {
    "flops": "effective FLOP/s: prefill cost per scheduled token",
    "attention_bandwidth": "effective KV bytes/s: decode cost per context token per step",
    "step_overhead_s": "seconds every step costs (scheduling, sampling, launches)",
    "frontend_s": "seconds before a request reaches the engine (HTTP, tokenizing)",
}

SHARED_GPU_FREE: dict[str, str] = {
    **FREE,
    "bandwidth": "effective weight bytes/s: the part of every step a shared GPU divides",
}
"""FREE and the weights' bandwidth, for runs where workers share a GPU: there a step's GPU
time is multiplied by the workers running and its overhead is not, so the two are separate
numbers (alone they are one)."""

_FLOOR = {"step_overhead_s": 1e-4, "frontend_s": 1e-4}
"""Starting values for constants a profile may set to 0 (log space needs a positive one)."""

_BOUND = math.log(100.0)
"""How far (a factor) a constant may move from the starting profile."""

_STEP = 0.1
"""Finite-difference step, in log space."""

_MISSING = 3.0
"""The residual of a figure the replay lacks where the measurement has it."""

Job = tuple[PlannedRun, TimingProfile]
Replayer = Callable[[BenchmarkExperiment, Sequence[Job]], list[Figures]]
"""Replays (run, profile) jobs; `replay_serial` in this process, `ParallelReplayer` in a
pool of processes (a fit's finite differences are independent replays)."""


def replay_serial(experiment: BenchmarkExperiment, jobs: Sequence[Job]) -> list[Figures]:
    return [replay(experiment, run, profile) for run, profile in jobs]


class ParallelReplayer:
    """Replays jobs on `executor`'s processes, in order."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def __call__(self, experiment: BenchmarkExperiment, jobs: Sequence[Job]) -> list[Figures]:
        futures = [self.executor.submit(replay, experiment, run, p) for run, p in jobs]
        return [f.result() for f in futures]


def base_profile(experiment: BenchmarkExperiment) -> TimingProfile:
    """The profile the experiment's simulated pools run with: the starting point of a fit.
    Pools with different profiles cannot share one fitted profile: a ValueError."""
    spec = experiment.spec
    found = set()
    for pool in spec.workers:
        flags = spec.simulator.flags(pool)
        if "--profile" in flags:
            found.add(flags[flags.index("--profile") + 1])
        else:
            for variant in spec.engines().values():
                found.add(default_profile_name(resolve_geometry(variant.model)))
    if len(found) != 1:
        raise ValueError(f"the pools run {len(found)} timing profiles ({sorted(found)}): one only")
    return resolve_profile(found.pop())


def _start(base: TimingProfile, free: Mapping[str, str]) -> dict[str, float]:
    values = base.model_dump()
    values["attention_bandwidth"] = base.attention_bandwidth or base.bandwidth
    return {name: max(float(values[name]), _FLOOR.get(name, 0.0)) for name in free}


def with_constants(
    base: TimingProfile, constants: dict[str, float], name: str, fitted_on: Sequence[str]
) -> TimingProfile:
    """`base` with the free constants replaced, named as fitted on `fitted_on` (run ids)."""
    return base.model_copy(
        update={
            **constants,
            "name": name,
            "source": f"kvbench predict: {base.name} with {', '.join(constants)} fitted",
            "fitted_on": tuple(fitted_on),
            "calibrated_for": None,
        }
    )


class FitResult(BaseModel):
    """The fitted profile, how well it matches its own runs, and what the fit cost."""

    model_config = ConfigDict(frozen=True)

    profile: TimingProfile
    start: dict[str, float]
    constants: dict[str, float]
    fitted_on: tuple[str, ...]
    replays: int
    rms_log_error: float
    """Root mean square of log(replayed / measured) over the fitted figures."""


class _OutOfBudget(Exception):
    pass


def _residuals(
    runs: Sequence[MeasuredRun], replayed: list[Figures], figures: Sequence[str]
) -> list[float]:
    out = []
    for measured, got in zip(runs, replayed, strict=True):
        for name in figures:
            want = measured.figures.get(name)
            if want is None or want <= 0:
                continue
            value = got.get(name)
            out.append(math.log(value / want) if value and value > 0 else _MISSING)
    return out


def fit_profile(
    experiment: BenchmarkExperiment,
    runs: Sequence[MeasuredRun],
    base: TimingProfile,
    *,
    budget: int = 40,
    prior: float = 0.05,
    start: dict[str, float] | None = None,
    replayer: Replayer = replay_serial,
    name: str = "fitted",
    free: Mapping[str, str] = FREE,
    figures: Sequence[str] = FITTED,
) -> FitResult:
    """Fit the `free` constants of `base` to `figures` of `runs` (of `experiment`) with at
    most `budget` evaluations (each replays every run; the search stops at the budget with
    the best point so far); `start` (constants) overrides where the search begins, `prior`
    is the pull back to `base` per unit of log change."""
    origin = _start(base, free)
    begin = start or origin
    names = list(free)
    ids = [r.run.id for r in runs]
    x0 = np.array([math.log(begin[n] / origin[n]) for n in names])
    seen: dict[tuple[float, ...], np.ndarray] = {}
    best: list[tuple[float, np.ndarray]] = []

    def constants(x: np.ndarray) -> dict[str, float]:
        return {n: origin[n] * math.exp(v) for n, v in zip(names, x, strict=True)}

    def key(x: np.ndarray) -> tuple[float, ...]:
        return tuple(round(float(v), 9) for v in x)

    def evaluate(points: list[np.ndarray]) -> None:
        """Replay every run at every point not seen yet, all in one batch of jobs."""
        new = list({key(x): x for x in points if key(x) not in seen}.values())
        if len(seen) + len(new) > budget:
            raise _OutOfBudget
        jobs = [(r.run, with_constants(base, constants(x), name, ids)) for x in new for r in runs]
        replayed = replayer(experiment, jobs)
        for i, x in enumerate(new):
            data = _residuals(runs, replayed[i * len(runs) : (i + 1) * len(runs)], figures)
            seen[key(x)] = np.array(data + [prior * v for v in x])
            best.append((float(np.sum(np.square(data))) / max(len(data), 1), x.copy()))

    def fun(x: np.ndarray) -> np.ndarray:
        evaluate([x])
        return seen[key(x)]

    def jac(x: np.ndarray) -> np.ndarray:
        """Forward differences of `_STEP` in log space (10 %): smaller steps see only the
        staircase that discrete engine steps make of a figure."""
        steps, moved = [], []
        for i in range(len(x)):
            steps.append(_STEP if x[i] + _STEP <= _BOUND else -_STEP)
            moved.append(x.copy())
            moved[-1][i] += steps[-1]
        evaluate([x, *moved])
        f0 = seen[key(x)]
        columns = [(seen[key(m)] - f0) / h for m, h in zip(moved, steps, strict=True)]
        return np.stack(columns, axis=1)

    with contextlib.suppress(_OutOfBudget):
        least_squares(fun, x0, jac=jac, bounds=(-_BOUND, _BOUND), max_nfev=budget, method="trf")
    cost, x = min(best, key=lambda b: b[0]) if best else (float("nan"), x0)
    fitted = constants(x)
    return FitResult(
        profile=with_constants(base, fitted, name, ids),
        start=origin,
        constants=fitted,
        fitted_on=tuple(ids),
        replays=len(seen) * len(runs),
        rms_log_error=math.sqrt(cost) if cost == cost else cost,
    )
