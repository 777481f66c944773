"""The `Cluster` contract: what the runner relies on from every back end, run against each.

A back end enters the suite as a `Backend`: how to make a cluster, how to disturb a worker
and a load generator from outside (as a node, a user or a crash would), and how to see what
it left behind. The Kubernetes back end joins with the operator.
"""

import os
import signal
from abc import ABC, abstractmethod
from pathlib import Path

import pytest
import yaml

from kvbench.api import BenchmarkExperiment, parse_experiment
from kvbench.runner.cluster import ChildNames, Cluster, WorkerInfo
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]


class Backend(ABC):
    """One back end under the contract."""

    @abstractmethod
    def cluster(self) -> Cluster:
        """A cluster; a second call is a restarted runner's view of the same place."""

    @abstractmethod
    async def kill_worker(self, worker: WorkerInfo) -> None:
        """End a worker from outside, as a crash or a node does."""

    @abstractmethod
    async def kill_load(self, names: ChildNames) -> None:
        """End an attempt's load generator from outside without a result."""

    @abstractmethod
    def leftovers(self) -> list[str]:
        """What still runs that the back end started."""


class LocalBackend(Backend):
    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self._clusters: list[LocalCluster] = []

    def cluster(self) -> LocalCluster:
        cluster = LocalCluster(self.work_dir)
        self._clusters.append(cluster)
        return cluster

    async def kill_worker(self, worker: WorkerInfo) -> None:
        children = self._clusters[-1].children
        child = children.get(worker.name)
        assert child is not None
        await children.stop(child, grace=0)

    async def kill_load(self, names: ChildNames) -> None:
        children = self._clusters[-1].children
        child = children.get(names.load)
        assert child is not None
        os.killpg(child.pid, signal.SIGKILL)

    def leftovers(self) -> list[str]:
        cluster = LocalCluster(self.work_dir)
        return [c.name for c in cluster.children.all() if cluster.children.alive(c)]


@pytest.fixture(params=["local"])
def backend(request, tmp_path: Path) -> Backend:
    return LocalBackend(tmp_path / "work")


def small_experiment(**spec_changes) -> BenchmarkExperiment:
    """Two simulated workers, one prefix point: a run of a few seconds."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    spec["workers"] = [{"name": "gpu", "replicas": 2, "simulation": {"profile": "qwen3-0.6b-24gb"}}]
    spec["routing"] = [{"name": "service", "service": {}}]
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["load"].update(concurrency=[4], trials=1)
    for key, value in spec_changes.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    document["metadata"]["name"] = "contract"
    return parse_experiment(document)
