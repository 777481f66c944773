"""Cluster back ends the experiment runner drives: local processes and Kubernetes."""

from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    Cluster,
    DynamoEndpoint,
    LoadState,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)

__all__ = [
    "ArmEndpoint",
    "ChildNames",
    "Cluster",
    "DynamoEndpoint",
    "LoadState",
    "PodsEndpoint",
    "UrlEndpoint",
    "WorkerInfo",
]
