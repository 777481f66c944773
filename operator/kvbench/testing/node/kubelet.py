"""A node's kubelet (1.20.2, built from Debian's source) and its kube-proxy, configured as a
kubeadm or kind node configures them, with what this machine needs said where it is set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

__all__ = [
    "KubeletSettings", "kube_proxy_argv", "kube_proxy_config", "kube_proxy_shared", "kubelet_argv",
    "kubelet_config",
]  # fmt: skip


class KubeletSettings(BaseModel):
    """What one node's kubelet is told."""

    node: str
    node_ip: str
    labels: dict[str, str]
    taints: list[str]
    """`key=value:Effect`, registered with the node."""
    root_dir: Path
    pod_logs_dir: Path
    """This node's own: the host's file system is shared (`build_kubernetes.sh` says why)."""
    cgroup_root: str
    runtime_endpoint: str
    kubeconfig: Path
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    cluster_dns: str
    cluster_domain: str = "cluster.local"


def kubelet_config(settings: KubeletSettings, path: Path) -> Path:
    """The KubeletConfiguration file (v1beta1, the 1.20 kubelet's)."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": settings.node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": settings.node_ip,
        "healthzPort": 10248,
        "tlsCertFile": str(settings.serving_cert),
        "tlsPrivateKeyFile": str(settings.serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(settings.ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": settings.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "clusterDomain": settings.cluster_domain,
        "clusterDNS": [settings.cluster_dns],
        # No host resolver for pods: nothing outside the machine is reachable (dnsPolicy
        # Default gets an empty resolv.conf; ClusterFirst gets the cluster DNS only).
        "resolvConf": "",
        "failSwapOn": False,
        # Every node is the whole machine: the kubelets would evict for each other's use.
        # Images cannot be pulled again here: never collect one.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "volumePluginDir": str(settings.root_dir / "volume-plugins"),
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def kubelet_argv(binary: Path, settings: KubeletSettings, config: Path) -> list[str]:
    labels = ",".join(f"{k}={v}" for k, v in settings.labels.items())
    argv = [
        "env",
        f"KVBENCH_POD_LOGS_DIR={settings.pod_logs_dir}",
        str(binary),
        f"--config={config}",
        f"--kubeconfig={settings.kubeconfig}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint={settings.runtime_endpoint}",
        f"--image-service-endpoint={settings.runtime_endpoint}",
        "--runtime-request-timeout=15m",
        f"--node-ip={settings.node_ip}",
        f"--hostname-override={settings.node}",
        f"--root-dir={settings.root_dir}",
        f"--cert-dir={settings.root_dir / 'pki'}",
        f"--node-labels={labels}",
        # The kubelet asks for -999 for itself; this machine refuses negative scores.
        "--oom-score-adj=0",
    ]
    if settings.taints:
        argv.append(f"--register-with-taints={','.join(settings.taints)}")
    return argv


def kube_proxy_shared(cluster_cidr: str) -> dict[str, Any]:
    """What every node's kube-proxy shares, kept where kubeadm keeps it (`config.conf` of
    kube-system/kube-proxy, which the operator reads for the Service arm's balancing):
    iptables mode, as kind runs it; conntrack table sizes the host's (a node's network
    namespace may not set them); no OOM score below 0 (refused here)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": cluster_cidr,
        "conntrack": {"maxPerCore": 0, "min": 0},
        "oomScoreAdj": 0,
    }


def kube_proxy_config(
    shared: dict[str, Any], node: str, node_ip: str, kubeconfig: Path, path: Path
) -> Path:
    """One node's kube-proxy configuration file: the shared part and its own addresses."""
    config = {
        **shared,
        "hostnameOverride": node,
        "bindAddress": node_ip,
        "healthzBindAddress": f"{node_ip}:10256",
        "metricsBindAddress": f"{node_ip}:10249",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def kube_proxy_argv(binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}"]
