"""The objects the Kubernetes back end creates, as pure functions of the spec: one module per
child (workers, router, load generator) over what they share (`common`)."""

from kvbench.kube.manifests.common import (
    GPU_PRESENT,
    LABEL_ATTEMPT,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    LABEL_POOL,
    LABEL_RUN,
    LABEL_UID,
    MANAGED_BY,
    ExperimentRef,
    Manifest,
    kube_name,
)
from kvbench.kube.manifests.load import load_job, load_objects
from kvbench.kube.manifests.router import router_objects
from kvbench.kube.manifests.workers import KV_EVENTS_PORT, engine_args, worker_objects

__all__ = [
    "GPU_PRESENT",
    "KV_EVENTS_PORT",
    "LABEL_ATTEMPT",
    "LABEL_COMPONENT",
    "LABEL_EXPERIMENT",
    "LABEL_POOL",
    "LABEL_RUN",
    "LABEL_UID",
    "MANAGED_BY",
    "ExperimentRef",
    "Manifest",
    "engine_args",
    "kube_name",
    "load_job",
    "load_objects",
    "router_objects",
    "worker_objects",
]
