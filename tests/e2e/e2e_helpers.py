"""What the end-to-end tests share: experiment documents, kubectl apply, waiting on phase."""

from pathlib import Path
from typing import Any

import kubernetes
import yaml

from kvbench.kube.store import ConfigMapStore
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import (
    CPU_NODE_SHARE,
    apply,
    get,
    restart_operator,
    wait_phase,
)

__all__ = [
    "CPU_NODE_SHARE", "GPU", "ROOT", "apply", "article_002_document", "experiment_document", "get",
    "restart_operator", "results_store", "wait_phase",
]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
GPU = {"nvidia.com/gpu.present": "true"}


def experiment_document(example: str, name: str, **spec: Any) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "examples" / example).read_text())
    document["metadata"]["name"] = name
    document["spec"].update(spec)
    return document


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
    # Router arms at the experiment's time scale, not in real time: these tests check what the
    # operator does, not the router's choices (tests/integration/runner/test_router_time_scale.py).
    spec["simulator"] = {"onCluster": True, "routerTimeScale": None}
    spec["cleanup"] = {"keepJobs": True}
    spec["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    return document


def results_store(cluster: TestCluster, namespace: str, name: str) -> ConfigMapStore:
    """The experiment's results as the operator stored them (its ConfigMaps), loaded."""
    uid = get(cluster, namespace, name)["metadata"]["uid"]
    store = ConfigMapStore(
        kubernetes.client.CoreV1Api(cluster.api_client()), namespace, name, uid, {}
    )
    store.load()
    return store
