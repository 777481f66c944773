"""Whether an experiment's pools fit the GPUs free now: counted per node as the scheduler
counts them, the experiment's own old workers left out, all pools at once."""

from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import (
    V1Container,
    V1Node,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from kvbench.api import parse_experiment
from kvbench.kube.capacity import gpu_shortfall
from kvbench.kube.manifests import LABEL_UID

ROOT = Path(__file__).resolve().parents[3]
GPU_NODE = {"nvidia.com/gpu.present": "true"}


def _node(name: str, gpus: int, unschedulable: bool = False) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels=GPU_NODE if gpus else {}),
        spec=V1NodeSpec(unschedulable=unschedulable),
        status=V1NodeStatus(allocatable={"nvidia.com/gpu": str(gpus)}),
    )


def _pod(node: str, gpus: int, uid: str = "other", phase: str = "Running") -> V1Pod:
    container = V1Container(
        name="c", resources=V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
    )
    return V1Pod(
        metadata=V1ObjectMeta(name=f"p-{node}", labels={LABEL_UID: uid}),
        spec=V1PodSpec(node_name=node, containers=[container]),
        status=V1PodStatus(phase=phase),
    )


def _spec(*pools: tuple[int, int]) -> Any:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["workers"] = [
        {"name": f"p{i}", "replicas": replicas, "nodeSelector": GPU_NODE,
         "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        for i, (replicas, gpus) in enumerate(pools)
    ]  # fmt: skip
    return parse_experiment(document).spec


NODES = [_node("a", 2), _node("b", 2), _node("cpu", 0)]


def test_pools_that_fit_the_free_gpus_start() -> None:
    assert gpu_shortfall(_spec((3, 1)), NODES, [_pod("a", 1)], "me") is None


def test_gpus_taken_by_others_make_the_experiment_wait_with_the_numbers() -> None:
    shortfall = gpu_shortfall(_spec((3, 1)), NODES, [_pod("a", 2)], "me")
    assert shortfall is not None and not shortfall.never
    assert "pool p0 needs 3 x 1 nvidia.com/gpu" in shortfall.message
    assert "2 fit now, 3 with the nodes empty" in shortfall.message


def test_the_experiments_own_workers_and_ended_pods_free_their_gpus() -> None:
    pods = [_pod("a", 2, uid="me"), _pod("b", 2, phase="Succeeded")]
    assert gpu_shortfall(_spec((4, 1)), NODES, pods, "me") is None


def test_a_replica_needs_its_gpus_on_one_node() -> None:
    shortfall = gpu_shortfall(_spec((1, 3)), NODES, [], "me")
    assert shortfall is not None and shortfall.never, "no node has 3"


def test_pools_are_counted_together_and_cordoned_nodes_not_at_all() -> None:
    assert gpu_shortfall(_spec((2, 1), (2, 1)), NODES, [], "me") is None
    nodes = [_node("a", 2), _node("b", 2, unschedulable=True)]
    shortfall = gpu_shortfall(_spec((2, 1), (2, 1)), nodes, [], "me")
    assert shortfall is not None and shortfall.never and "pool p1" in shortfall.message
    assert "pool p0" not in shortfall.message


def test_pools_without_gpus_always_fit() -> None:
    assert gpu_shortfall(_spec((5, 0)), [_node("cpu", 0)], [], "me") is None
