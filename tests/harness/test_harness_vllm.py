"""vLLM's image runs the simulator: a StatefulSet of engines becomes Ready on GPU nodes."""

from __future__ import annotations

import json

import kubernetes
from kubeio import http_get

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

MODEL = "Qwen/Qwen3-0.6B"


def test_a_statefulset_of_vllm_image_pods_becomes_ready(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    apps: kubernetes.client.AppsV1Api,
    namespace: str,
) -> None:
    engine = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.31.0",
        # As the operator writes them: `vllm serve`'s positional model, then flags;
        # --host 0.0.0.0 would clash between pods here, so the agent binds the pod IP.
        "args": [MODEL, "--port", "8000", "--enable-prompt-tokens-details", "--host", "0.0.0.0"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    apps.create_namespaced_stateful_set(
        namespace,
        {"metadata": {"name": "engine"},
         "spec": {"serviceName": "engine", "replicas": 2,
                  "selector": {"matchLabels": {"app": "engine"}},
                  "template": {"metadata": {"labels": {"app": "engine"}},
                               "spec": {"containers": [engine]}}}},
    )  # fmt: skip

    wait_for(
        lambda: apps.read_namespaced_stateful_set("engine", namespace).status.ready_replicas == 2,
        180,
        "2 ready vLLM-image replicas",
    )

    pods = core.list_namespaced_pod(namespace, label_selector="app=engine").items
    assert {p.spec.node_name for p in pods} == {n.name for n in cluster.nodes if n.gpus}
    for p in pods:
        models = json.loads(http_get(p.status.pod_ip, 8000, "/v1/models"))
        assert [m["id"] for m in models["data"]] == [MODEL]
