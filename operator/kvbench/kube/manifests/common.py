"""What every object kvbench makes shares: names, labels, ownership and the pod hardening.

Every child is named from the experiment (and the run's index and attempt), labelled with
the experiment's UID, and owned by the experiment, so two experiments never touch each
other's objects and deleting an experiment deletes everything it made. Every pod passes the
restricted Pod Security Standard (`kvbench.kube.pod_security`; a `modelCache.hostPath` is the
one exception, the user's choice): user and group 10001, no privilege escalation, all
capabilities dropped, a RuntimeDefault seccomp profile, and a read-only root filesystem for
every image known to write only to /tmp (an emptyDir): the project's image and the router's.
vLLM's own image keeps a writable root (docs/operator.md, "Pod hardening", says why). The
load generator and routers stay off GPU nodes (`gpu_free_affinity`); Service names end in the
cluster's own DNS domain (`cluster_domain`).
"""

import copy
import hashlib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kvbench.api.experiment import API_VERSION, KIND

MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_EXPERIMENT = "kvbench.io/experiment"
LABEL_UID = "kvbench.io/experiment-uid"
LABEL_COMPONENT = "kvbench.io/component"
LABEL_POOL = "kvbench.io/pool"
LABEL_RUN = "kvbench.io/run-index"
LABEL_ATTEMPT = "kvbench.io/attempt"
GPU_PRESENT = "nvidia.com/gpu.present"
Manifest = dict[str, Any]
CLUSTER_DOMAIN_ENV = "KVBENCH_CLUSTER_DOMAIN"
"""The operator setting (the chart's `clusterDomain`) that names the cluster's DNS domain."""
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def cluster_domain(resolv_conf: Path = Path("/etc/resolv.conf")) -> str:
    """The cluster's DNS domain: the operator setting, else what the kubelet wrote into this
    pod's resolv.conf (`search <ns>.svc.<domain> svc.<domain> <domain>`), else cluster.local
    (outside a pod, where no search entry names a `svc` domain)."""
    configured = os.environ.get(CLUSTER_DOMAIN_ENV, "").strip().strip(".")
    if configured:
        return configured
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return DEFAULT_CLUSTER_DOMAIN
    for line in lines:
        words = line.split()
        if words[:1] != ["search"]:
            continue
        entries = [word.strip(".") for word in words[1:]]
        for own, svc, domain in zip(entries, entries[1:], entries[2:], strict=False):
            if svc == f"svc.{domain}" and own.endswith(f".{svc}"):
                return domain
    return DEFAULT_CLUSTER_DOMAIN


def kube_name(*parts: str, limit: int = 63) -> str:
    """`parts` joined by `-`, shortened with a hash of the whole when over `limit`."""
    name = "-".join(parts)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


class ExperimentRef(BaseModel):
    """The experiment resource children are named after and owned by."""

    name: str
    namespace: str
    uid: str
    image: str = "ghcr.io/kvbench/kvbench:0.1.0"
    """The project's image (operator, load generator, simulator)."""
    cluster_domain: str = Field(default_factory=cluster_domain)
    """The DNS domain Service names resolve under (not always cluster.local)."""

    def labels(self, component: str, **extra: str) -> dict[str, str]:
        return {
            MANAGED_BY: "kvbench",
            LABEL_EXPERIMENT: self.name,
            LABEL_UID: self.uid,
            LABEL_COMPONENT: component,
            **extra,
        }

    def selector(self, component: str) -> dict[str, str]:
        return {LABEL_UID: self.uid, LABEL_COMPONENT: component}

    def metadata(self, name: str, component: str, **extra: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(component, **extra),
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": self.name,
                    "uid": self.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }

    @property
    def headless(self) -> str:
        """The headless Service that gives every worker pod a stable name."""
        return kube_name(self.name, "workers")

    @property
    def service(self) -> str:
        """The ClusterIP Service over every pool's pods: the system under test of service
        arms."""
        return kube_name(self.name, "svc")

    @property
    def load_account(self) -> str:
        return kube_name(self.name, "loadgen")

    def statefulset(self, pool: str) -> str:
        # StatefulSet pods carry `<name>-<hash>` in a label: keep room for it.
        return kube_name(self.name, pool, limit=52)

    def service_host(self, service: str) -> str:
        """A Service's fully qualified name, which resolves from any namespace."""
        return f"{service}.{self.namespace}.svc.{self.cluster_domain}"


USER_ID = 10001
"""The project image's user and group (its Dockerfile); every container runs as them."""


def pod_security(volume_group: bool = False) -> dict[str, Any]:
    """A pod's security context. `volume_group` for pods that write to volumes they do not
    own (a model cache): the kubelet makes them group 10001's, and only when the volume's
    root is not already (OnRootMismatch; Kubernetes 1.20 without the feature chowns at every
    start, slower but the same result)."""
    context: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if volume_group:
        context |= {"fsGroup": USER_ID, "fsGroupChangePolicy": "OnRootMismatch"}
    return context


def container_security(read_only_root: bool) -> dict[str, Any]:
    """A container's security context. `read_only_root` where the image writes nowhere but
    /tmp (an emptyDir here, and HOME): checked by running it, docs/operator.md says how."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
        "runAsUser": USER_ID,
        "runAsGroup": USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def tmp_mount() -> dict[str, Any]:
    return {"name": "tmp", "mountPath": "/tmp"}


def tmp_volume() -> dict[str, Any]:
    """Scratch space (and HOME) that a read-only root leaves writable."""
    return {"name": "tmp", "emptyDir": {}}


POD_ENV = [
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
]


GPU_FREE = {"key": GPU_PRESENT, "operator": "NotIn", "values": ["true"]}
"""Nodes GPU feature discovery has not labelled as having a GPU. A node without the label
passes, so the back end also checks each pod's node for GPU allocatable once it is placed."""


def gpu_free_affinity(affinity: dict[str, Any] | None) -> dict[str, Any]:
    """`affinity` (the user's, or none) with the GPU-free rule in every required node
    selector term: terms are ORed, so a term without it would let the pod onto a GPU node."""
    merged = copy.deepcopy(affinity or {})
    node = merged["nodeAffinity"] = merged.get("nodeAffinity") or {}
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    required = node[key] = node.get(key) or {}
    terms = required["nodeSelectorTerms"] = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        expressions = term.get("matchExpressions") or []
        term["matchExpressions"] = [*expressions, copy.deepcopy(GPU_FREE)]
    return merged


def resources(spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.requests:
        out["requests"] = {k: str(v) for k, v in spec.requests.items()}
    if spec.limits:
        out["limits"] = {k: str(v) for k, v in spec.limits.items()}
    return out


def placement(spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        out["tolerations"] = [t.to_k8s() for t in spec.tolerations]
    if spec.affinity:
        out["affinity"] = spec.affinity
    return out
