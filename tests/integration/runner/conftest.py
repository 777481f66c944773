"""Experiments run once per session on the local back end (simulated workers on loopback)."""

import asyncio
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import BenchmarkExperiment, RunRecord, parse_experiment
from kvbench.loadgen.results import LoadgenResult, read_result
from kvbench.loadgen.workload.mooncake import Trace
from kvbench.runner import DirectoryStore, ExperimentRunner, RunObserver
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.runner.cluster.virtual.cluster import VirtualCluster, in_virtual_time

ROOT = Path(__file__).resolve().parents[3]


SERVICE = [{"name": "service", "service": {}}]


@dataclass(frozen=True)
class Ran:
    """An experiment run to the end on the local back end: its records, the results
    directory that holds them (with every run's raw result document) and its work directory."""

    experiment: BenchmarkExperiment
    records: list[RunRecord]
    store: DirectoryStore
    work: Path

    def point(self, arm: str, prefixes: int | None = None) -> RunRecord:
        """The one run of `arm` (at `prefixes` prefixes, when given)."""
        [record] = [
            r
            for r in self.records
            if r.arm == arm and (prefixes is None or r.point.prefixes == prefixes)
        ]
        return record

    def result(self, record: RunRecord) -> LoadgenResult:
        """The load generator's result document of the run's recorded attempt."""
        assert record.raw_results is not None, f"run {record.id} kept no result document"
        return read_result(self.store.read_raw(record.raw_results))

    def names(self, record: RunRecord) -> ChildNames:
        """The children's names of the run's recorded attempt (its logs are named after them)."""
        return ChildNames(
            experiment=self.experiment.metadata.name, index=record.index, attempt=record.attempt
        )


def article_002(
    layout: str,
    arms: list[dict[str, Any]],
    prefixes: list[int],
    requests: int | None = None,
    popularity: dict[str, Any] | None = None,
    time_scale: float | None = None,
) -> BenchmarkExperiment:
    """The article-002 example of a layout, cut to concurrency 8 and one trial; `requests`
    fixes the measured requests of every point instead of the article's max(200, 20 x P),
    `popularity` the prefixes' popularity instead of uniform, `time_scale` the simulator's."""
    name = "prefix-cache-service.yaml" if layout == "6w" else "prefix-cache-service-3-workers.yaml"
    document = copy.deepcopy(yaml.safe_load((ROOT / "examples" / name).read_text()))
    spec = document["spec"]
    spec["routing"] = arms
    spec["workload"]["sharedPrefix"]["prefixes"] = prefixes
    if requests is not None:
        spec["workload"]["sharedPrefix"].update(requestsPerPrefix=1, minRequests=requests)
    if popularity is not None:
        spec["workload"]["sharedPrefix"]["popularity"] = popularity
    spec["load"].update(concurrency=[8], trials=1)
    if time_scale is not None:
        spec.setdefault("simulator", {})["timeScale"] = time_scale
    return parse_experiment(document)


def run_experiment(
    experiment: BenchmarkExperiment,
    out: Path,
    observer: RunObserver | None = None,
    trace: Trace | None = None,
    virtual: bool = False,
) -> Ran:
    """Run every run of `experiment` (a trace workload's with its `trace`) into the results
    directory `out`, in virtual time when `virtual`; every run must be recorded with figures
    (a failed one fails the caller with its reasons)."""
    store = DirectoryStore(out)
    work = out / "work"
    cluster = VirtualCluster(work) if virtual else LocalCluster(work)
    experiment = in_virtual_time(experiment) if virtual else experiment
    runner = ExperimentRunner(experiment, cluster, store, observer=observer, trace=trace)
    result = asyncio.run(runner.run())
    assert not result.failed, "\n\n".join(f"{r.id}: {r.error}" for r in result.failed)
    assert len(result.records) == len(runner.plan.runs)
    return Ran(experiment=experiment, records=result.records, store=store, work=work)


@pytest.fixture(scope="session")
def six_workers(tmp_path_factory) -> Ran:
    """The article's own points where exact counts matter: 2 prefixes (which pairs miss) and
    24 prefixes through the Service and with prefix affinity."""
    experiment = article_002("6w", [*SERVICE, {"name": "affinity", "prefixAffinity": {}}], [2, 24])
    return run_experiment(experiment, tmp_path_factory.mktemp("six-workers"))


@pytest.fixture(scope="session")
def three_workers(tmp_path_factory) -> Ran:
    experiment = article_002("3w", SERVICE, [2])
    return run_experiment(experiment, tmp_path_factory.mktemp("three-workers"))


@pytest.fixture(scope="session")
def capacity_points(tmp_path_factory) -> dict[str, Ran]:
    """7, 12 and 24 prefixes on both layouts with 1,200 requests per point: one run's hit
    rate is then within about 1.5 points of its mean (with the article's 200-480 requests,
    single runs scatter by up to 8 points, which is why the article took medians of 3)."""
    return {
        layout: run_experiment(
            article_002(layout, SERVICE, [7, 12, 24], requests=1200),
            tmp_path_factory.mktemp(f"capacity-{layout}"),
        )
        for layout in ("6w", "3w")
    }


@pytest.fixture(scope="session")
def run_local():
    """Run an experiment on the local back end into a directory (`run_experiment`)."""
    return run_experiment
