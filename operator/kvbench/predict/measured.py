"""The measured side: the runs of a results directory that virtual time can replay.

A run is replayable when its arm is one virtual time models (a Service or prefix/session
affinity) and it succeeded; router, Dynamo and external arms route by code that is not
simulated, so their runs are left out of the fit (and said to be)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvbench.api import BenchmarkExperiment, RoutingArm
from kvbench.plan import PlannedRun, plan_experiment
from kvbench.predict.figures import Figures, figures_of
from kvbench.runner import DirectoryStore

__all__ = ["Measured", "MeasuredError", "MeasuredRun", "load_measured", "modelled"]


class MeasuredError(ValueError):
    """The measured input cannot be fitted on; the message says why."""


class MeasuredRun(BaseModel):
    """One measured run: where it sits in its experiment's plan, and its figures."""

    model_config = ConfigDict(frozen=True)

    run: PlannedRun
    figures: Figures

    @property
    def group(self) -> str:
        """The run's configuration without its trial: the unit a held-out check leaves out
        (trials of one configuration would leak into each other)."""
        return self.run.id.rsplit(".", 1)[0]


class Measured(BaseModel):
    """An experiment and its replayable measured runs."""

    model_config = ConfigDict(frozen=True)

    source: str
    experiment: BenchmarkExperiment
    runs: tuple[MeasuredRun, ...]
    skipped: tuple[str, ...] = ()


def modelled(arm: RoutingArm) -> bool:
    """Whether virtual time replays this arm (a Service's random choice, or affinity)."""
    return arm.service is not None or arm.affinity


def load_measured(path: Path) -> Measured:
    """The replayable runs of results directory `path`; a MeasuredError when it is not one,
    or none of its runs can be replayed."""
    store = DirectoryStore(path)
    if not store.is_results_directory():
        raise MeasuredError(f"{path}: not a kvbench results directory (no experiment.yaml)")
    try:
        store.load()
    except (OSError, ValueError) as err:
        raise MeasuredError(f"{path}: unreadable results directory: {err}") from None
    experiment = store.experiment()
    spec = experiment.spec
    if spec.workload.trace is not None:
        raise MeasuredError(f"{path}: trace workloads are not fitted on (yet)")
    planned = {r.id: r for r in plan_experiment(experiment).runs}
    arms = {a.name: a for a in spec.routing}
    runs, skipped = [], []
    for record in sorted(store.records(), key=lambda r: r.index):
        arm = arms.get(record.arm)
        if arm is None or record.id not in planned:
            skipped.append(f"{record.id}: not in the experiment's plan")
        elif not modelled(arm):
            skipped.append(f"{record.id}: arm {arm.name} is not modelled in virtual time")
        elif record.error is not None:
            skipped.append(f"{record.id}: failed ({record.error_reason})")
        elif record.summary.ttft_p50 is None:
            skipped.append(f"{record.id}: no TTFT measured")
        else:
            runs.append(MeasuredRun(run=planned[record.id], figures=figures_of(record.summary)))
    if not runs:
        why = "; ".join(skipped) or "no recorded runs"
        raise MeasuredError(f"{path}: no run of an arm virtual time models ({why})")
    return Measured(
        source=str(path), experiment=experiment, runs=tuple(runs), skipped=tuple(skipped)
    )
