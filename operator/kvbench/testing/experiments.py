"""An experiment on a test cluster as a user handles it: kubectl apply, read it back, wait
for a phase; and the operator's pod replaced, as a crash or an eviction replaces it."""

import json
import time
from typing import Any

import kubernetes

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.kube.manifests import LABEL_UID
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

__all__ = [
    "CPU_NODE_SHARE", "apply", "children", "get", "namespace_objects", "restart_operator",
    "wait_phase",
]  # fmt: skip

CPU_NODE_SHARE = {"requests": {"cpu": "500m", "memory": "512Mi"}}
"""The load generator's and a router's requests in tests: every test node is this 2-core
machine, so the default (1 CPU each) would not let one CPU node hold both beside the
operator."""


def apply(cluster: TestCluster, namespace: str, document: dict[str, Any]) -> None:
    path = cluster.workdir / f"{namespace}-{document['metadata']['name']}.json"
    path.write_text(json.dumps(document))
    applied = cluster.kubectl("apply", "--validate=false", "-n", namespace, "-f", str(path))
    assert applied.returncode == 0, applied.stderr


def get(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any]:
    return kubernetes.client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


def wait_phase(
    cluster: TestCluster, namespace: str, name: str, phases: set[str], timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = get(cluster, namespace, name)
        if (body.get("status") or {}).get("phase") in phases:
            return body
        assert time.monotonic() < deadline, f"{name} never reached {phases}: {body.get('status')}"
        time.sleep(1)


def restart_operator(
    cluster: TestCluster, operator: dict, grace_period_seconds: int | None = None
) -> None:
    """Delete the operator's pod (`grace_period_seconds=0`: killed, no time to stop) and wait
    for its replacement to be Ready."""
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    namespace = operator["metadata"]["namespace"]
    labels = operator["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    old = {
        p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=selector).items
    }
    core.delete_collection_namespaced_pod(
        namespace, label_selector=selector, grace_period_seconds=grace_period_seconds
    )

    def replaced() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return any(
            p.metadata.uid not in old
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods
        )

    wait_for(replaced, 180, "a new operator pod to be Ready")


_KINDS = (
    ("pod", "CoreV1Api", "list_namespaced_pod"),
    ("service", "CoreV1Api", "list_namespaced_service"),
    ("configmap", "CoreV1Api", "list_namespaced_config_map"),
    ("serviceaccount", "CoreV1Api", "list_namespaced_service_account"),
    ("statefulset", "AppsV1Api", "list_namespaced_stateful_set"),
    ("deployment", "AppsV1Api", "list_namespaced_deployment"),
    ("job", "BatchV1Api", "list_namespaced_job"),
    ("role", "RbacAuthorizationV1Api", "list_namespaced_role"),
    ("rolebinding", "RbacAuthorizationV1Api", "list_namespaced_role_binding"),
)


def namespace_objects(
    cluster: TestCluster, namespace: str, label_selector: str | None = None
) -> list[str]:
    """`kind/name` of every object of the kinds an experiment makes in `namespace`."""
    client = cluster.api_client()
    found = []
    for kind, api, call in _KINDS:
        listed = getattr(getattr(kubernetes.client, api)(client), call)(
            namespace, label_selector=label_selector
        )
        found += [f"{kind}/{o.metadata.name}" for o in listed.items]
    return sorted(found)


def children(cluster: TestCluster, namespace: str, uid: str) -> list[str]:
    """What the experiment with `uid` made (its children carry its UID label)."""
    return namespace_objects(cluster, namespace, f"{LABEL_UID}={uid}")
