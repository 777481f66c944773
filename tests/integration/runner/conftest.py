"""Experiments run once per session on the local back end (simulated workers on loopback)."""

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import BenchmarkExperiment, RunRecord, parse_experiment
from kvbench.runner import ExperimentRunner, ResultsStore
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]


def article_002(
    layout: str, arms: list[dict[str, Any]], prefixes: list[int]
) -> BenchmarkExperiment:
    """The article-002 example of a layout, cut to concurrency 8 and one trial."""
    name = "prefix-cache-service.yaml" if layout == "6w" else "prefix-cache-service-3-workers.yaml"
    document = copy.deepcopy(yaml.safe_load((ROOT / "examples" / name).read_text()))
    spec = document["spec"]
    spec["routing"] = arms
    spec["workload"]["sharedPrefix"]["prefixes"] = prefixes
    spec["load"].update(concurrency=[8], trials=1)
    return parse_experiment(document)


def run_experiment(experiment: BenchmarkExperiment, out: Path) -> list[RunRecord]:
    store = ResultsStore(out)
    runner = ExperimentRunner(experiment, LocalCluster(out / "work"), store)
    return asyncio.run(runner.run())


@pytest.fixture(scope="session")
def six_workers(tmp_path_factory) -> list[RunRecord]:
    experiment = article_002(
        "6w",
        [{"name": "service", "service": {}}, {"name": "affinity", "prefixAffinity": {}}],
        [2, 7, 12, 24],
    )
    return run_experiment(experiment, tmp_path_factory.mktemp("six-workers"))


@pytest.fixture(scope="session")
def three_workers(tmp_path_factory) -> list[RunRecord]:
    experiment = article_002("3w", [{"name": "service", "service": {}}], [2, 7, 12, 24])
    return run_experiment(experiment, tmp_path_factory.mktemp("three-workers"))


@pytest.fixture(scope="session")
def run_local():
    """Run an experiment on the local back end into a directory; returns its records."""
    return run_experiment
