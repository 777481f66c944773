"""Fixtures every test directory shares: one test cluster per session, a namespace per
test, the experiment CRD installed once.

A failing test's report carries the tail of every harness process's log.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests interrupt. A suite started in the background
    (CI: `.ci/run &`, nohup) inherits SIGINT ignored, and an ignored signal stays ignored
    across exec, so a `kvbench run` a test sends SIGINT would run on to its end; a handler
    is reset to the default at exec instead."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[TestCluster]:
    """The test cluster on its real nodes (`kvbench.testing.node`): kubelets, containerd, CNI,
    kube-proxy and a cluster DNS, the images built with Docker."""
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root: network namespaces, cgroups, containerd")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(message: str) -> None:
        """The cluster's long waits reach the terminal past pytest's capture."""
        with capture.global_and_fixture_disabled():
            print(f"\n[test cluster] {message}", file=sys.stderr, flush=True)

    try:
        test_cluster = TestCluster(say=say).start()
    except RuntimeError as first:
        # What a killed earlier session left on this machine can fail a start, whose stop()
        # then clears it: say why on the terminal, then start once more; a second failure
        # fails every test that needs the cluster.
        say(f"the start failed; starting once more. Why:\n{first}")
        test_cluster = TestCluster(say=say).start()
    try:
        yield test_cluster
    finally:
        test_cluster.stop()


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


@pytest.fixture(scope="session")
def experiment_crd(cluster: TestCluster) -> str:
    """The BenchmarkExperiment CRD on the test cluster (kubectl 1.20 needs --validate=false
    for its CEL rules, which the 1.20 API server drops)."""
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
