"""Before a run starts: what this back end cannot run, and whether the GPUs are free."""

import asyncio
import weakref

from kubernetes.client.rest import ApiException

from kvbench.api import ExperimentSpec
from kvbench.kube.capacity import Shortfall, gpu_count, gpu_shortfall
from kvbench.kube.cluster.api import KubeApi

__all__ = ["capacity_lock", "gpu_shortfall_now", "kube_problems"]

_LOCKS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = (
    weakref.WeakKeyDictionary()
)


def capacity_lock() -> asyncio.Lock:
    """One per event loop (the operator's): between one experiment's capacity check and its
    pods' placement no other experiment checks, so two never count the same free GPUs."""
    loop = asyncio.get_running_loop()
    if loop not in _LOCKS:
        _LOCKS[loop] = asyncio.Lock()
    return _LOCKS[loop]


def kube_problems(spec: ExperimentSpec) -> list[str]:
    """What this back end cannot run yet, by field."""
    problems = []
    for i, arm in enumerate(spec.routing):
        if arm.dynamo is not None:
            problems.append(
                f"spec.routing[{i}] ({arm.name}).dynamo: Dynamo arms run locally only for now "
                "(kvbench run); on a cluster use an external arm in front of a Dynamo "
                "deployment"
            )
        if arm.router is not None and arm.router.implementation != "vllm-router":
            problems.append(
                f"spec.routing[{i}] ({arm.name}).router.implementation: only vllm-router is "
                "deployed by kvbench"
            )
    if spec.simulator.on_cluster:
        for i, pool in enumerate(spec.workers):
            if pool.simulation is not None and pool.simulation.workers_per_gpu > 1:
                problems.append(
                    f"spec.workers[{i}] ({pool.name}).simulation.workersPerGpu: simulated "
                    "pods on a cluster each model a GPU of their own; a shared GPU is "
                    "simulated by kvbench run (local or --virtual)"
                )
    if spec.simulator.mode == "virtual":
        problems.append(
            "spec.simulator.mode: virtual runs workers and load in one process with no pods "
            "(kvbench run); the operator deploys pods: use http (the default)"
        )
    return problems


def gpu_shortfall_now(api: KubeApi, spec: ExperimentSpec, uid: str) -> Shortfall | None:
    """What the cluster's free GPUs lack for every pool of `spec` (blocking)."""
    if not any(gpu_count(pool) for pool in spec.workers):
        return None
    nodes = api.core.list_node().items
    try:
        pods = api.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items
    except ApiException as err:
        if err.status != 403:
            raise
        # Watching a namespace list, the operator reads pods there only: GPUs taken in
        # other namespaces show as Unschedulable workers (docs/operator.md).
        pods = api.core.list_namespaced_pod(api.namespace, field_selector="spec.nodeName!=").items
    return gpu_shortfall(spec, nodes, pods, uid)
