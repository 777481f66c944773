"""Cluster names without a DNS server: a per-pod /etc/hosts kept current by the agent.

Every container sees its pod's hosts file at /etc/hosts (bound in its private
mount namespace). Besides localhost and the pod's own name, as the kubelet
writes it, the file carries what cluster DNS would answer: each Service's
`NAME.NS.svc.cluster.local` (and shorter forms, the bare name within the
namespace) for its ClusterIP, and `HOSTNAME.SUBDOMAIN.NS.svc...` for pods with a
hostname and subdomain, as StatefulSet members behind a headless Service have.
A headless Service's own name resolves to its first ready pod only: a hosts file
has no round-robin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CLUSTER_DOMAIN", "hosts_file"]

Obj = dict[str, Any]
CLUSTER_DOMAIN = "cluster.local"


def _names(name: str, namespace: str, own_namespace: str) -> list[str]:
    """`name` in a namespace as a pod of `own_namespace` may write it, longest first."""
    full = [f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}", f"{name}.{namespace}.svc"]
    full.append(f"{name}.{namespace}")
    return [*full, name] if namespace == own_namespace else full


def _ready(pod: Obj) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def hosts_file(pod: Obj, pod_ip: str, services: Iterable[Obj], pods: Iterable[Obj]) -> str:
    """The /etc/hosts of `pod` given the cluster's current Services and pods."""
    meta, spec = pod["metadata"], pod["spec"]
    namespace = meta["namespace"]
    hostname = spec.get("hostname") or meta["name"]
    own = [hostname]
    if spec.get("subdomain"):
        own = [*_names(f"{hostname}.{spec['subdomain']}", namespace, namespace)[:1], hostname]
    lines = [
        "# Kubernetes-managed hosts file (kvbench test cluster node agent).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{pod_ip}\t{' '.join(own)}",
    ]
    members: dict[tuple[str, str], list[str]] = {}
    for other in pods:
        o_meta, o_spec = other["metadata"], other["spec"]
        ip = other.get("status", {}).get("podIP")
        if not ip or not o_spec.get("hostname") or not o_spec.get("subdomain"):
            continue
        if other.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        sub = f"{o_spec['hostname']}.{o_spec['subdomain']}"
        lines.append(f"{ip}\t{' '.join(_names(sub, o_meta['namespace'], namespace))}")
        if _ready(other):
            members.setdefault((o_meta["namespace"], o_spec["subdomain"]), []).append(ip)
    for service in services:
        s_meta, s_spec = service["metadata"], service["spec"]
        key = (s_meta["namespace"], s_meta["name"])
        cluster_ip = s_spec.get("clusterIP")
        address = members.get(key, [None])[0] if cluster_ip == "None" else cluster_ip
        if address and s_spec.get("type") != "ExternalName":
            lines.append(f"{address}\t{' '.join(_names(key[1], key[0], namespace))}")
    return "\n".join(lines) + "\n"
