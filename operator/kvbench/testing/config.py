"""What a test cluster is made of: its nodes. Each real node reports this machine's CPUs and
memory as its capacity (a kubelet measures them); a GPU node advertises `gpus` and NVIDIA's
labels."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["DEFAULT_NODES", "NodeSpec"]


class NodeSpec(BaseModel):
    """A node a test asks for: a GPU node has `gpus` > 0 and NVIDIA's labels."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    gpus: int = Field(default=0, ge=0)
    gpu_product: str = "NVIDIA-L4"
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


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec(name="gpu-node-0", gpus=1),
    NodeSpec(name="gpu-node-1", gpus=1),
    NodeSpec(name="cpu-node-0"),
)
