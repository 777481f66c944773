"""Cluster back ends the experiment runner drives: local processes and Kubernetes."""

from kvbench.runner.cluster.base import Cluster, LoadOutcome, Target, WorkerInfo

__all__ = ["Cluster", "LoadOutcome", "Target", "WorkerInfo"]
