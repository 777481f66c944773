"""Installed with the chart's defaults, the operator watches its release's namespace only; an
experiment applied in another namespace is told so (Ready=False, NotWatched, an Event saying
where the operator runs and how to change what it watches) instead of getting nothing at all,
and nothing is made for it."""

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from e2e_helpers import apply, experiment_document, get

from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import children
from kvbench.testing.operator_install import SYSTEM_NAMESPACE, installed_operator
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_operator(cluster: TestCluster, experiment_crd: str) -> Iterator[dict[str, Any]]:
    """The chart as `helm install` without values renders it (`installed_operator` would
    otherwise watch every namespace)."""
    with installed_operator(cluster, {"watch": {"namespaces": [], "allNamespaces": False}}) as d:
        yield d


def test_an_experiment_outside_the_watched_namespace_is_told_why(
    cluster: TestCluster, namespace: str, default_operator: dict[str, Any]
) -> None:
    name = "elsewhere"
    apply(cluster, namespace, experiment_document("prefix-cache-service.yaml", name))
    core = kubernetes.client.CoreV1Api(cluster.api_client())

    def told() -> tuple[dict[str, Any], list[Any]] | None:
        status = get(cluster, namespace, name).get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c["reason"] == "NotWatched"]
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return (conditions[0], events) if conditions and events else None

    wait_for(lambda: told() is not None, 120, "the NotWatched condition and Event")
    found = told()
    assert found is not None
    condition, events = found
    assert (condition["type"], condition["status"]) == ("Ready", "False")
    message = condition["message"]
    assert f"in namespace {SYSTEM_NAMESPACE}" in message and f"not {namespace}" in message
    assert "watch.namespaces" in message
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "NotWatched", message)]
    body = get(cluster, namespace, name)
    # the one condition; `phase: Pending` is the API server's, the schema's default
    assert set(body["status"]) <= {"conditions", "phase"}, body["status"]
    assert body["status"].get("phase", "Pending") == "Pending"
    assert children(cluster, namespace, body["metadata"]["uid"]) == []
