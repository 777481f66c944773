"""What a test cluster is made of: its nodes, and the node agent's configuration.

These models cross a process boundary: the harness writes `AgentConfig` as JSON
and the node agent and service proxy read it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kvbench.testing.controlplane import ApiAccess

__all__ = ["DEFAULT_NODES", "AgentConfig", "NodeSpec", "PlacedNode"]


class NodeSpec(BaseModel):
    """A node a test asks for: a GPU node has `gpus` > 0 and NVIDIA's labels."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    gpus: int = Field(default=0, ge=0)
    gpu_product: str = "NVIDIA-L4"
    cpu: str = "8"
    memory: str = "32Gi"
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, Any]] = Field(default_factory=list)

    def all_labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if self.gpus:
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": self.gpu_product,
                "nvidia.com/gpu.count": str(self.gpus),
            }
        return labels | self.labels


class PlacedNode(NodeSpec):
    """A node with its loopback address and the /24 its pods' IPs come from."""

    ip: str
    pod_cidr: str


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec(name="gpu-node-0", gpus=1),
    NodeSpec(name="gpu-node-1", gpus=1),
    NodeSpec(name="cpu-node-0"),
)


class AgentConfig(BaseModel):
    """Everything the node agent and the service proxy need, written by the harness."""

    access: ApiAccess
    nodes: list[PlacedNode]
    kubelet_cert: Path
    kubelet_key: Path
    state_dir: Path
    apiserver_host: str
    apiserver_port: int
