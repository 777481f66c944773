"""One measured run again in virtual time, with a candidate timing profile.

The replay is the virtual back end's own run of that planned run (same run index, so the
same worker seeds, the same Service choices and the same request sequence as `kvbench run`
gave the measured one), driven without the runner: no store, no records, just the figures."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from kvbench.api import BenchmarkExperiment
from kvbench.loadgen.results import read_result
from kvbench.plan import PlannedRun
from kvbench.predict.figures import Figures, figures_of
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.cluster.virtual.cluster import VirtualCluster
from kvbench.runner.mapping import build_run_config, run_summary
from kvbench.sim.timing import TimingProfile

__all__ = ["replay"]


async def _replay(
    experiment: BenchmarkExperiment, run: PlannedRun, profile: TimingProfile | None, work: Path
) -> Figures:
    spec = experiment.spec
    arm = next(a for a in spec.routing if a.name == run.arm)
    cluster = VirtualCluster(work, profile)
    names = ChildNames(experiment=experiment.metadata.name, index=run.index, attempt=1)
    await cluster.recover(None)
    workers = await cluster.start_workers(
        spec, run.variant, spec.engines()[run.variant], arm, names
    )
    endpoint = await cluster.open_arm(spec, arm, workers, names)
    config = build_run_config(spec, run, endpoint, workers, True)
    await cluster.start_load(spec, config, names)
    result = read_result(await cluster.wait_load(names, 0))
    await cluster.teardown(spec.cleanup)
    return figures_of(run_summary(result.summary, result.client))


def replay(
    experiment: BenchmarkExperiment, run: PlannedRun, profile: TimingProfile | None
) -> Figures:
    """`run` of `experiment` in virtual time with `profile` (None: the pools' own)."""
    with tempfile.TemporaryDirectory(prefix="kvbench-predict-") as work:
        return asyncio.run(_replay(experiment, run, profile, Path(work)))
