"""Node objects the node agent registers, and the heartbeats that keep them Ready.

Like the kubelet, the agent renews a Lease in kube-node-lease and refreshes the
node's conditions, so the node lifecycle controller never taints it unreachable.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import httpx

from kvbench.testing.config import PlacedNode
from kvbench.testing.container import now_rfc3339
from kvbench.testing.kubeapi import KubeApi, KubeApiError

__all__ = ["HEARTBEAT_SECONDS", "heartbeat", "node_object", "register_node"]

Obj = dict[str, Any]
HEARTBEAT_SECONDS = 10.0
_LEASE_SECONDS = 40
log = logging.getLogger(__name__)


def _conditions(since: str) -> list[Obj]:
    """Healthy conditions, heartbeat now, unchanged since the agent registered the node."""
    now = now_rfc3339()
    healthy = {
        "MemoryPressure": "KubeletHasSufficientMemory",
        "DiskPressure": "KubeletHasNoDiskPressure",
        "PIDPressure": "KubeletHasSufficientPID",
    }
    conditions = [
        {"type": kind, "status": "False", "reason": reason, "message": "",
         "lastHeartbeatTime": now, "lastTransitionTime": since}
        for kind, reason in healthy.items()
    ]  # fmt: skip
    conditions.append(
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kvbench node agent is posting ready status",
         "lastHeartbeatTime": now, "lastTransitionTime": since}
    )  # fmt: skip
    return conditions


def node_object(node: PlacedNode, kubelet_port: int) -> Obj:
    capacity = {"cpu": node.cpu, "memory": node.memory, "pods": "110",
                "ephemeral-storage": "100Gi"}  # fmt: skip
    if node.gpus:
        capacity["nvidia.com/gpu"] = str(node.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node.all_labels()},
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr], "taints": node.taints},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": _conditions(now_rfc3339()),
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "kvbench test node",
                "containerRuntimeVersion": "kvbench-local://1",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


async def register_node(api: KubeApi, node: PlacedNode, kubelet_port: int) -> None:
    """Create the Node (or take over one left by an earlier agent) with its status."""
    body = node_object(node, kubelet_port)
    try:
        await api.create("/api/v1/nodes", body)
    except KubeApiError as err:
        if err.status != 409:
            raise
        await api.patch(f"/api/v1/nodes/{node.name}", {"metadata": body["metadata"],
                                                       "spec": body["spec"]})  # fmt: skip
        await api.patch(f"/api/v1/nodes/{node.name}/status", {"status": body["status"]})


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def _renew_lease(api: KubeApi, node: str) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    spec = {"holderIdentity": node, "leaseDurationSeconds": _LEASE_SECONDS,
            "renewTime": _micro_time()}  # fmt: skip
    try:
        await api.patch(f"{path}/{node}", {"spec": spec}, strategic=False)
    except KubeApiError as err:
        if err.status != 404:
            raise
        await api.create(path, {"metadata": {"name": node, "namespace": "kube-node-lease"},
                                "spec": spec})  # fmt: skip


async def heartbeat(api: KubeApi, nodes: list[PlacedNode]) -> None:
    """Renew leases and Ready conditions forever."""
    since = now_rfc3339()
    while True:
        for node in nodes:
            try:
                await _renew_lease(api, node.name)
                await api.patch(f"/api/v1/nodes/{node.name}/status",
                                {"status": {"conditions": _conditions(since)}})  # fmt: skip
            except (KubeApiError, OSError, httpx.HTTPError) as err:
                log.warning("heartbeat of %s: %s", node.name, err)
        await asyncio.sleep(HEARTBEAT_SECONDS)
