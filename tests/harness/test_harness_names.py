"""Cluster names resolve in pods (per-pod /etc/hosts), and claims keep data across pods."""

from __future__ import annotations

import kubernetes
from harness_manifests import PROJECT_IMAGE, echo_container, pod
from kubeio import http_get, pod_or_none

from kvbench.testing.wait import wait_for

RESOLVER = """
import socket, time, urllib.request
print('started', flush=True)
while True:  # 'late' does not exist yet when this starts: its name must appear
    try:
        late = socket.gethostbyname('late')
        break
    except OSError:
        time.sleep(0.1)
for name in ('front', 'front.{ns}.svc.cluster.local', 'engine-0.engine', 'late'):
    print(name, socket.gethostbyname(name))
print('via-service', urllib.request.urlopen('http://front/name', timeout=10).read().decode())
"""


def _service(name: str, selector: dict[str, str], port: int, **spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": port,
                                                  "targetPort": 8080}], **spec},
    }  # fmt: skip


def _statefulset(name: str, container: dict[str, object], **spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"serviceName": name, "replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [container]}}, **spec},
    }  # fmt: skip


def test_pods_resolve_services_and_statefulset_members_by_name(
    core: kubernetes.client.CoreV1Api, apps: kubernetes.client.AppsV1Api, namespace: str
) -> None:
    app = {"app": "engine"}
    core.create_namespaced_service(namespace, _service("engine", app, 8080, clusterIP="None"))
    front = core.create_namespaced_service(namespace, _service("front", app, 80))
    apps.create_namespaced_stateful_set(namespace, _statefulset("engine", echo_container()))
    wait_for(
        lambda: apps.read_namespaced_stateful_set("engine", namespace).status.ready_replicas == 1,
        60,
        "a ready engine",
    )
    engine_ip = core.read_namespaced_pod("engine-0", namespace).status.pod_ip
    script = RESOLVER.replace("{ns}", namespace)
    client = {"name": "main", "image": PROJECT_IMAGE, "command": ["python", "-c", script]}
    core.create_namespaced_pod(namespace, pod("client", client, restartPolicy="Never"))
    wait_for(lambda: core.read_namespaced_pod_log("client", namespace), 60, "a started client")

    late = core.create_namespaced_service(namespace, _service("late", app, 81))

    wait_for(
        lambda: core.read_namespaced_pod("client", namespace).status.phase == "Succeeded",
        60,
        "the client to resolve every name",
    )
    assert core.read_namespaced_pod_log("client", namespace).splitlines() == [
        "started",
        f"front {front.spec.cluster_ip}",
        f"front.{namespace}.svc.cluster.local {front.spec.cluster_ip}",
        f"engine-0.engine {engine_ip}",
        f"late {late.spec.cluster_ip}",
        "via-service engine-0",
    ]


def test_a_statefulset_claim_is_bound_and_keeps_its_data_for_the_next_pod(
    core: kubernetes.client.CoreV1Api, apps: kubernetes.client.AppsV1Api, namespace: str
) -> None:
    data = [{"name": "data", "mountPath": "/data"}]
    count = "import os\np = '/data/count'\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
    count += "open(p, 'w').write(str(n + 1))\n"
    init = {"name": "count", "image": PROJECT_IMAGE, "command": ["python", "-c", count],
            "volumeMounts": data}  # fmt: skip
    claim = {"metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    statefulset = _statefulset("store", echo_container(volumeMounts=data),
                               volumeClaimTemplates=[claim])  # fmt: skip
    statefulset["spec"]["template"]["spec"]["initContainers"] = [init]  # type: ignore[index]
    apps.create_namespaced_stateful_set(namespace, statefulset)

    def starts_counted(n: int, not_uid: str = "") -> str | None:
        found = pod_or_none(core, "store-0", namespace)
        if found is None or found.metadata.uid == not_uid or not found.status.pod_ip:
            return None
        ready = any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])
        seen = ready and http_get(found.status.pod_ip, 8080, "/file?p=/data/count")
        return found.metadata.uid if seen == str(n) else None

    first = wait_for(lambda: starts_counted(1), 60, "the first pod counting 1")
    bound = core.read_namespaced_persistent_volume_claim("data-store-0", namespace)
    assert bound.status.phase == "Bound"

    core.delete_namespaced_pod("store-0", namespace)

    wait_for(lambda: starts_counted(2, not_uid=first), 90, "the next pod counting 2")
