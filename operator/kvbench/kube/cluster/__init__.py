"""The Kubernetes back end (`KubernetesCluster`), split by concern as the local one is."""

from kvbench.kube.cluster.cluster import KubernetesCluster
from kvbench.kube.cluster.preflight import kube_problems

__all__ = ["KubernetesCluster", "kube_problems"]
