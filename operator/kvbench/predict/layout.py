"""The what-if: another layout (an experiment file: workers, KV size, arm, workload) run in
virtual time with the fitted profile, through the runner, into a results directory that
`kvbench report` reads like any other."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvbench.api import BenchmarkExperiment
from kvbench.loadgen.workload.mooncake import Trace
from kvbench.predict.figures import Figures, figures_of
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster.virtual.cluster import VirtualCluster, in_virtual_time
from kvbench.runner.cluster.virtual.preflight import virtual_problems
from kvbench.runner.observers import FanOut
from kvbench.sim.timing import TimingProfile

__all__ = ["LayoutError", "Predicted", "predict_layout"]


class LayoutError(ValueError):
    """The layout cannot be run in virtual time; the message lists every reason."""


class Predicted(BaseModel):
    """One run of the layout: its id and predicted figures, or why it failed."""

    model_config = ConfigDict(frozen=True)

    id: str
    figures: Figures
    error: str | None = None


def predict_layout(
    layout: BenchmarkExperiment, profile: TimingProfile, out: Path, trace: Trace | None = None
) -> list[Predicted]:
    """Run `layout` in virtual time with `profile` for every pool, results under `out`."""
    problems = virtual_problems(layout.spec)
    if problems:
        raise LayoutError(
            "the layout cannot run in virtual time:\n" + "\n".join(f"  {p}" for p in problems)
        )
    store = DirectoryStore(out)
    runner = ExperimentRunner(
        in_virtual_time(layout), VirtualCluster(out / "work", profile), store, FanOut([]), None,
        trace,
    )  # fmt: skip
    result = asyncio.run(runner.run())
    return [
        Predicted(id=r.id, figures=figures_of(r.summary), error=r.error)
        for r in sorted(result.records, key=lambda r: r.index)
    ]
