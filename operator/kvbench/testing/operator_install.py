"""The operator installed from its chart into a test cluster, as a pod under the chart's
ServiceAccount (the test cluster maps the project's image to the local `kvbench`), and
removed again, pod and all, so it never handles later tests' experiments."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kubernetes
import yaml

from kvbench.kube.chart import render_chart
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

__all__ = ["SYSTEM_NAMESPACE", "installed_operator"]

SYSTEM_NAMESPACE = "kvbench-system"


@contextmanager
def installed_operator(
    cluster: TestCluster, values: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """The chart applied (CRD left out: the caller installs it) with `values` (default
    `watch.allNamespaces`); yields the operator's Deployment once its pod is Ready."""
    cluster.ensure_namespace(SYSTEM_NAMESPACE)
    manifests = [
        m for m in render_chart(values or {"watch": {"allNamespaces": True}},
                                namespace=SYSTEM_NAMESPACE)
        if m["kind"] != "CustomResourceDefinition"
    ]  # fmt: skip
    path = cluster.workdir / "chart.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    applied = cluster.kubectl("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    apps = kubernetes.client.AppsV1Api(cluster.api_client())
    name = deployment["metadata"]["name"]

    def ready() -> bool:
        found = apps.read_namespaced_deployment(name, SYSTEM_NAMESPACE)
        return (found.status.ready_replicas or 0) >= 1

    wait_for(ready, 120, "the operator's pod to be Ready")
    try:
        yield deployment
    finally:
        cluster.kubectl("delete", "-f", str(path), "--wait=true", timeout=180)
        core = kubernetes.client.CoreV1Api(cluster.api_client())
        wait_for(
            lambda: not core.list_namespaced_pod(SYSTEM_NAMESPACE).items,
            120,
            "the operator pod gone",
        )
