"""An `external` arm on the test cluster: a front end the user runs (here a Service over two
simulated servers of their own), its URL and the labels of its pods. The operator starts no
worker, sends the load through that URL, and reads the prefix-cache counters of exactly the
labelled pods before and after the window."""

import json
from pathlib import Path

import kubernetes
import pytest
from e2e_helpers import GPU, apply, article_002_document, wait_phase

from kvbench.kube.store import ConfigMapStore
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow

IMAGE = "ghcr.io/kvbench/kvbench:0.1.0"
LABELS = {"app": "their-frontend"}


def _their_deployment(namespace: str) -> list[dict]:
    """Two `kvbench sim` servers and a ClusterIP Service: someone else's deployment."""
    serve = ["Qwen/Qwen3-0.6B", "--host", "$(POD_IP)", "--port", "8000",
             "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824"]  # fmt: skip
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "their-servers", "namespace": namespace, "labels": LABELS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "nodeSelector": GPU,
                    "containers": [
                        {
                            "name": "engine",
                            "image": IMAGE,
                            "command": ["kvbench", "sim", "serve"],
                            "args": serve,
                            "env": [pod_ip],
                            "ports": [{"containerPort": 8000}],
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": 8000},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "their-frontend", "namespace": namespace},
        "spec": {"selector": LABELS, "ports": [{"port": 8000, "targetPort": 8000}]},
    }
    return [deployment, service]


def test_an_external_arm_reads_the_labelled_pods_counters(
    cluster: TestCluster, namespace: str, operator: dict, tmp_path: Path
) -> None:
    path = tmp_path / "theirs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": _their_deployment(namespace)}))  # fmt: skip
    applied = cluster.kubectl("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    core = kubernetes.client.CoreV1Api(cluster.api_client())

    def their_pods() -> list:
        pods = core.list_namespaced_pod(namespace, label_selector="app=their-frontend").items
        ready = [p for p in pods if any(c.type == "Ready" and c.status == "True"
                                        for c in p.status.conditions or [])]  # fmt: skip
        return ready if len(ready) == 2 else []

    wait_for(their_pods, 180, "their two servers to be Ready")
    theirs = {p.metadata.name: p.metadata.uid for p in their_pods()}

    name = "external"
    document = article_002_document(name, [4], trials=1)
    document["spec"].pop("simulator")  # their servers, on their clock: latencies in wall time
    url = f"http://their-frontend.{namespace}.svc.cluster.local:8000"
    document["spec"]["routing"] = [
        {"name": "theirs", "external": {"url": url, "podSelector": LABELS}}
    ]
    apply(cluster, namespace, document)
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 600)
    assert body["status"]["phase"] == "Succeeded", body["status"]

    uid = body["metadata"]["uid"]
    store = ConfigMapStore(core, namespace, name, uid, {})
    store.load()
    (record,) = store.records()
    assert {p.pod: p.uid for p in record.pods} == theirs, "exactly the labelled pods"
    assert record.summary.errors == 0
    served = sum(p.requests for p in record.pods)
    assert served == record.summary.requests, "their counters account for every request"
    assert record.summary.token_hit_rate > 0.3, "their counters saw the shared prefixes hit"
    # The operator started no worker of its own: no StatefulSet, no pod but theirs and the Job's.
    apps = kubernetes.client.AppsV1Api(cluster.api_client())
    assert apps.list_namespaced_stateful_set(namespace).items == []
    assert core.list_namespaced_pod(namespace, label_selector=f"kvbench.io/experiment-uid={uid},"
                                    "kvbench.io/component=worker").items == []  # fmt: skip
