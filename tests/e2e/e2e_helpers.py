"""What the end-to-end tests share: experiment documents, kubectl apply, waiting on phase."""

import json
import time
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
GPU = {"nvidia.com/gpu.present": "true"}


def experiment_document(example: str, name: str, **spec: Any) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "examples" / example).read_text())
    document["metadata"]["name"] = name
    document["spec"].update(spec)
    return document


def apply(cluster: TestCluster, namespace: str, document: dict[str, Any]) -> None:
    path = Path(cluster.workdir) / f"{namespace}-{document['metadata']['name']}.json"
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


def article_002_document(name: str, prefixes: list[int], trials: int) -> dict:
    """Article 002 scaled down: 6 simulated workers in two pools on GPU nodes (no GPU is
    requested: the simulator needs none), concurrency 8."""
    document = experiment_document("prefix-cache-service.yaml", name)
    spec = document["spec"]
    spec["workers"] = [
        {"name": "gpu24", "replicas": 3, "nodeSelector": GPU,
         "simulation": {"profile": "qwen3-0.6b-24gb"}},
        {"name": "gpu8", "replicas": 3, "nodeSelector": GPU,
         "simulation": {"profile": "qwen3-1.7b-8gb"}},
    ]  # fmt: skip
    spec["workload"]["sharedPrefix"]["prefixes"] = prefixes
    spec["load"].update(concurrency=[8], trials=trials)
    spec["simulator"] = {"onCluster": True}
    spec["cleanup"] = {"keepJobs": True}
    spec.pop("loadGenerator")
    return document


def restart_operator(cluster: TestCluster, operator: dict) -> None:
    """Delete the operator's pod and wait for its replacement to be Ready."""
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    namespace = operator["metadata"]["namespace"]
    labels = operator["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    old = {
        p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=selector).items
    }
    core.delete_collection_namespaced_pod(namespace, label_selector=selector)

    def replaced() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return any(
            p.metadata.uid not in old
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods
        )

    wait_for(replaced, 120, "a new operator pod to be Ready")
