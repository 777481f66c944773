"""Fixtures every test directory shares: one test cluster per session, a namespace per
test, the experiment CRD installed once.

A failing test's report carries the tail of every harness process's log.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for


def _test_cluster(pytestconfig: pytest.Config, real_nodes: bool) -> Iterator[TestCluster]:
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root: apt-get for its build, mount namespaces for pods")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(message: str) -> None:
        """The cluster's long waits reach the terminal past pytest's capture."""
        with capture.global_and_fixture_disabled():
            print(f"\n[test cluster] {message}", file=sys.stderr, flush=True)

    test_cluster = TestCluster(say=say, real_nodes=real_nodes).start()
    try:
        yield test_cluster
    finally:
        test_cluster.stop()


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[TestCluster]:
    yield from _test_cluster(pytestconfig, real_nodes=False)


@pytest.fixture(scope="session")
def real_cluster(pytestconfig: pytest.Config) -> Iterator[TestCluster]:
    """The test cluster on real nodes (`kvbench.testing.node`): kubelets, containerd, CNI,
    kube-proxy and cluster DNS, the images built with Docker."""
    yield from _test_cluster(pytestconfig, real_nodes=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    test_cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(test_cluster, TestCluster):
        report.sections.append(("test cluster logs", test_cluster.diagnostics()))


@pytest.fixture
def core(cluster: TestCluster) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(cluster.api_client())


@pytest.fixture
def apps(cluster: TestCluster) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(cluster.api_client())


@pytest.fixture
def batch(cluster: TestCluster) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(cluster.api_client())


@pytest.fixture(scope="module")
def experiment_crd(cluster: TestCluster) -> str:
    """The BenchmarkExperiment CRD on the test cluster (kubectl 1.20 needs --validate=false
    for its CEL rules, which the 1.20 API server drops). Per module, not per session: a
    directory may override `cluster` (tests/e2e runs on real nodes), and a session fixture
    would keep the first cluster it was made for."""
    crd = Path(__file__).resolve().parents[1] / "crds" / "benchmarkexperiments.kvbench.io.yaml"
    applied = cluster.kubectl("apply", "--validate=false", "-f", str(crd))
    assert applied.returncode == 0, applied.stderr
    name = "crd/benchmarkexperiments.kvbench.io"

    def established() -> bool:  # kubectl 1.20's wait errors while the CRD has no conditions
        ready = cluster.kubectl("wait", "--for=condition=established", name, "--timeout=10s")
        return ready.returncode == 0

    wait_for(established, 60, "the CRD to be established")
    return name


@pytest.fixture
def namespace(cluster: TestCluster, core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace; deleted afterwards, waiting until its pods are gone (GPUs free)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.ensure_namespace(name)
    yield name
    core.delete_namespace(name)
    wait_for(lambda: not core.list_namespaced_pod(name).items, 90, f"pods of {name} to be gone")
