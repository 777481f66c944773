"""The operator installed from its chart and running in the test cluster as a pod, under the
chart's ServiceAccount, so every API call it makes is checked against the chart's RBAC (the
test cluster maps the project's image to the local `kvbench`)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kvbench.kube.chart import render_chart
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

SYSTEM = "kvbench-system"


@pytest.fixture(scope="module")
def operator(cluster: TestCluster, experiment_crd: str) -> Iterator[dict[str, Any]]:
    """The chart applied with `watch.allNamespaces`; yields the operator's Deployment. Gone
    (pod and all) after each module (pytest's package scope needs an __init__.py), so it never
    picks up other tests' experiments."""
    cluster.ensure_namespace(SYSTEM)
    manifests = [
        m for m in render_chart({"watch": {"allNamespaces": True}}, namespace=SYSTEM)
        if m["kind"] != "CustomResourceDefinition"
    ]  # fmt: skip
    path = Path(cluster.workdir) / "chart.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    applied = cluster.kubectl("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    apps = kubernetes.client.AppsV1Api(cluster.api_client())
    name = deployment["metadata"]["name"]

    def ready() -> bool:
        found = apps.read_namespaced_deployment(name, SYSTEM)
        return (found.status.ready_replicas or 0) >= 1

    wait_for(ready, 120, "the operator's pod to be Ready")
    yield deployment
    cluster.kubectl("delete", "-f", str(path), "--wait=true", timeout=180)
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    wait_for(lambda: not core.list_namespaced_pod(SYSTEM).items, 120, "the operator pod gone")
