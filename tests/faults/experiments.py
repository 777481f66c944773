"""The campaign's experiments: article 002's workload cut small, simulated workers on the
test cluster's GPU nodes, kept Jobs (the invariants read them)."""

from pathlib import Path
from typing import Any

import yaml

from kvbench.testing.experiments import CPU_NODE_SHARE

ROOT = Path(__file__).resolve().parents[2]
GPU = {"nvidia.com/gpu.present": "true"}


def small_experiment(name: str, **spec: Any) -> dict[str, Any]:
    """Two workers, prefixes 2 and 7 at concurrency 4, one trial, a Service arm."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["metadata"]["name"] = name
    body = document["spec"]
    body["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU}]
    body["workload"]["sharedPrefix"].update(prefixes=[2, 7], requestsPerPrefix=6, minRequests=24)
    body["load"].update(concurrency=[4], trials=1)
    # Router arms at the experiment's time scale, not in real time: the campaigns check what
    # survives faults, not the router's choices (integration/runner/test_router_time_scale.py).
    body["simulator"] = {"onCluster": True, "routerTimeScale": None}
    body["cleanup"] = {"keepJobs": True}
    body["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    body.update(spec)
    return document
