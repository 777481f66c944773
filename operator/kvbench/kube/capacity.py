"""Whether an experiment's worker pools fit the cluster's GPUs now, before any pod is made.

Pools are started all at once or not at all: pods made without the GPUs to run them would
hold part of the cluster while they wait (two experiments each holding half could wait for
each other forever), so an experiment whose pools do not fit waits, with the reason, and
starts when GPUs free. Free GPUs per node are its allocatable `nvidia.com/gpu` less what
every pod bound to it that has not ended requests (as the scheduler counts them), except this
experiment's own workers, which a fresh run replaces.
"""

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from kvbench.api import ExperimentSpec, WorkerPool

__all__ = ["GPU", "Shortfall", "gpu_count", "gpu_shortfall"]

GPU = "nvidia.com/gpu"


class Shortfall(BaseModel):
    """What does not fit: `never` when the pools exceed the matching nodes' GPUs even with
    nothing else running (then waiting cannot help)."""

    message: str
    never: bool = False


def gpu_count(pool: WorkerPool) -> int:
    """GPUs one replica of the pool asks for."""
    resources = pool.resources
    wanted = (resources.limits or {}).get(GPU) or (resources.requests or {}).get(GPU) or 0
    return int(str(wanted))


def _matches(node: Any, selector: dict[str, str]) -> bool:
    labels = node.metadata.labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _allocatable(node: Any) -> int:
    return int(str((node.status.allocatable or {}).get(GPU, "0")))


def _requested(pod: Any) -> int:
    total = 0
    for container in pod.spec.containers or []:
        resources = container.resources
        limits, requests = (resources.limits or {}), (resources.requests or {})
        total += int(str(limits.get(GPU) or requests.get(GPU) or 0))
    return total


def _placeable(free: dict[str, int], nodes: list[str], each: int, replicas: int) -> int:
    """Replicas of `each` GPUs placed on `nodes`, fullest node first; `free` is updated."""
    placed = 0
    for name in sorted(nodes, key=lambda n: free[n]):
        while placed < replicas and free[name] >= each:
            free[name] -= each
            placed += 1
    return placed


def gpu_shortfall(
    spec: ExperimentSpec, nodes: Iterable[Any], pods: Iterable[Any], own_uid: str
) -> Shortfall | None:
    """None when every pool's GPUs are free now; else what is missing, pool by pool."""
    wanting = [(pool, gpu_count(pool)) for pool in spec.workers if gpu_count(pool) > 0]
    if not wanting:
        return None
    nodes = [n for n in nodes if not n.spec.unschedulable]
    total = {n.metadata.name: _allocatable(n) for n in nodes}
    free = dict(total)
    for pod in pods:
        node = pod.spec.node_name
        labels = pod.metadata.labels or {}
        ended = pod.status.phase in ("Succeeded", "Failed")
        if node in free and not ended and labels.get("kvbench.io/experiment-uid") != own_uid:
            free[node] -= _requested(pod)
    missing, never = [], False
    empty = dict(total)
    for pool, each in wanting:
        matching = [n.metadata.name for n in nodes if _matches(n, pool.node_selector or {})]
        ever = _placeable(empty, matching, each, pool.replicas)
        now = _placeable(free, matching, each, pool.replicas)
        if now < pool.replicas:
            never = never or ever < pool.replicas
            missing.append(
                f"pool {pool.name} needs {pool.replicas} x {each} {GPU} on nodes matching "
                f"{pool.node_selector or {}}: {now} fit now, {ever} with the nodes empty"
            )
    if not missing:
        return None
    return Shortfall(message="; ".join(missing), never=never)
