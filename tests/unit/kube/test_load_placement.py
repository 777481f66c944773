"""The load generator and the run's router never measure from a GPU node: the scheduler rule
knows only nodes GPU feature discovery labelled, so once placed, their node's allocatable
GPUs are read, and a load generator or router found on a GPU node fails the attempt and
stops its Job."""

import asyncio
import base64
import hashlib
from types import SimpleNamespace
from typing import Any

import pytest

from kvbench.api import RoutingArm, RunPlacement
from kvbench.kube.cluster.cluster import KubernetesCluster
from kvbench.kube.cluster.load import LoadJobs, gpus_of
from kvbench.kube.manifests import ExperimentRef
from kvbench.kube.results import PART_KEY, result_configmap_names
from kvbench.runner.cluster import ChildNames
from kvbench.runner.failures import LoadFailed

UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
NAMES = ChildNames(experiment="bx", index=3, attempt=1)
REF = ExperimentRef(name="bx", namespace="bench", uid=UID)
DOCUMENT = b"a finished run's result"
NODES = {
    "cpu-0": {"cpu": "16", "memory": "64Gi", "pods": "110"},
    "cpu-1": {"cpu": "16", "memory": "64Gi", "pods": "110"},
    "gpu-unlabelled": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
}


def _pod(name: str, node: str | None) -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, deletion_timestamp=None),
        spec=SimpleNamespace(node_name=node),
    )


class _Core:
    def __init__(self, load_node: str | None, router_node: str | None) -> None:
        self.load = [_pod(f"{NAMES.load}-x7k2p", load_node)]
        self.routers = [_pod(f"{NAMES.arm}-5d9c-q8w", router_node)] if router_node else []

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        if label_selector == f"job-name={NAMES.load}":
            return SimpleNamespace(items=self.load)
        assert "kvbench.io/component=router" in label_selector
        assert "kvbench.io/run-index=3" in label_selector
        return SimpleNamespace(items=self.routers)

    def read_node(self, name: str) -> Any:
        return SimpleNamespace(status=SimpleNamespace(allocatable=NODES[name]))

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        """The attempt's result, written whole into its first ConfigMap."""
        assert name == result_configmap_names(NAMES.prefix)[0]
        digest = hashlib.sha256(DOCUMENT).hexdigest()
        return SimpleNamespace(
            data={"chunks": "1", "sha256": digest, "index": "0"},
            binary_data={PART_KEY: base64.b64encode(DOCUMENT).decode()},
        )


class _Api:
    """What LoadJobs calls, answered in place."""

    def __init__(self, core: _Core) -> None:
        self.core = core
        self.deleted: list[tuple[str, str]] = []
        job = SimpleNamespace(status=SimpleNamespace(conditions=[]))
        self.batch = SimpleNamespace(read_namespaced_job=lambda name, namespace: job)
        self.objects = SimpleNamespace(
            delete=lambda kind, name, namespace: self.deleted.append((kind, name))
        )

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def _wait(load_node: str, router_node: str | None = None) -> tuple[_Api, Any]:
    api = _Api(_Core(load_node, router_node))
    jobs = LoadJobs(api, REF)  # type: ignore[arg-type]
    try:
        return api, asyncio.run(jobs.wait(NAMES, timeout=30))
    except LoadFailed as failure:
        return api, failure


def test_a_load_generator_on_cpu_nodes_returns_its_result() -> None:
    api, result = _wait("cpu-0", router_node="cpu-0")
    assert result == DOCUMENT
    assert api.deleted == []


def test_placement_names_each_ones_node_once_the_load_generator_is_placed() -> None:
    def placement(load_node: str | None, router_node: str | None) -> Any:
        jobs = LoadJobs(_Api(_Core(load_node, router_node)), REF)  # type: ignore[arg-type]
        return asyncio.run(jobs.placement(NAMES))

    assert placement(None, "cpu-0") is None
    assert placement("cpu-0", None) == {"loadGenerator": "cpu-0"}
    assert placement("cpu-0", "cpu-0") == {"loadGenerator": "cpu-0", "router": "cpu-0"}


def test_a_load_generator_on_an_unlabelled_gpu_node_fails_the_attempt_and_stops() -> None:
    api, failure = _wait("gpu-unlabelled")
    assert isinstance(failure, LoadFailed)
    assert "load generator" in str(failure) and "gpu-unlabelled" in str(failure)
    assert "8 nvidia.com/gpu" in str(failure)
    assert api.deleted == [("Job", NAMES.load)]


def test_a_router_on_a_gpu_node_fails_the_attempt() -> None:
    api, failure = _wait("cpu-0", router_node="gpu-unlabelled")
    assert isinstance(failure, LoadFailed)
    assert "the router" in str(failure)
    assert api.deleted == [("Job", NAMES.load)]


@pytest.mark.parametrize(
    ("allocatable", "gpus"),
    [
        ({"cpu": "8", "nvidia.com/gpu": "0"}, {}),
        ({"amd.com/gpu": "4"}, {"amd.com/gpu": "4"}),
        (None, {}),
    ],
)
def test_what_counts_as_a_gpu(allocatable: dict | None, gpus: dict) -> None:
    assert gpus_of(SimpleNamespace(status=SimpleNamespace(allocatable=allocatable))) == gpus


class _EarlierRouter(_Core):
    """The router an earlier run (index 2) opened, kept for this one (its workers kept)."""

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        if label_selector == f"job-name={NAMES.load}":
            return SimpleNamespace(items=self.load)
        found = "kvbench.io/run-index=2" in label_selector
        return SimpleNamespace(items=self.routers if found else [])


def _cluster(core: _Core, opened: ChildNames | None) -> KubernetesCluster:
    cluster = KubernetesCluster.__new__(KubernetesCluster)
    cluster.load = LoadJobs(_Api(core), REF)  # type: ignore[arg-type]
    cluster.arms = SimpleNamespace(opened=opened)  # type: ignore[assignment]
    return cluster


def test_the_record_gets_the_nodes_the_wait_found_and_a_router_only_for_a_router_arm() -> None:
    """The bug: the nodes were read to refuse GPU nodes, then dropped (no record kept them)."""
    cluster = _cluster(_Core("cpu-0", "cpu-1"), None)
    router = RoutingArm.model_validate({"name": "rr", "router": {"policy": "round_robin"}})
    service = RoutingArm.model_validate({"name": "svc", "service": {}})
    assert asyncio.run(cluster.wait_load(NAMES, timeout=30)) == DOCUMENT
    assert cluster.load.placed[NAMES.prefix] == {"loadGenerator": "cpu-0", "router": "cpu-1"}
    cluster.load.api = None  # type: ignore[assignment]  # read from what the wait kept
    placed = asyncio.run(cluster.load_placement(router, NAMES))
    assert placed == RunPlacement(load_generator="cpu-0", router="cpu-1")
    placed = asyncio.run(cluster.load_placement(service, NAMES))
    assert placed == RunPlacement(load_generator="cpu-0")


def test_a_router_kept_from_an_earlier_run_is_found_and_checked() -> None:
    """The bug: only a router labelled with this run was looked for, so a router kept from an
    earlier run (same arm, workers kept) was neither checked for GPUs nor recorded."""
    earlier = ChildNames(experiment="bx", index=2, attempt=1)
    router = RoutingArm.model_validate({"name": "rr", "router": {"policy": "round_robin"}})
    cluster = _cluster(_EarlierRouter("cpu-0", "cpu-1"), earlier)
    placed = asyncio.run(cluster.load_placement(router, NAMES))
    assert placed == RunPlacement(load_generator="cpu-0", router="cpu-1")
    on_gpu = _cluster(_EarlierRouter("cpu-0", "gpu-unlabelled"), earlier)
    with pytest.raises(LoadFailed, match="the router"):
        asyncio.run(on_gpu.wait_load(NAMES, timeout=30))
