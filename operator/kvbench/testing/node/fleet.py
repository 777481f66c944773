"""The test cluster's real nodes together: the host bridge, the images, each node, the
cluster DNS, and what a cloud's node controller would add (GPUs in the node status)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from kvbench.procs import ManagedProcess, tail
from kvbench.testing.build import Binaries
from kvbench.testing.config import NodeSpec
from kvbench.testing.longwaits import Say
from kvbench.testing.node.images import PAUSE_IMAGE, NodeImages, node_images
from kvbench.testing.node.kubelet import kube_proxy_shared
from kvbench.testing.node.network import NetworkPlan, bridge_down, bridge_up
from kvbench.testing.node.node import NodeFiles, RealNode

__all__ = ["KUBELET_ROOT", "RUNTIME_ROOT", "NodeFleet", "taint_strings"]

RUNTIME_ROOT = Path("/var/lib/kvbench/node-runtimes")
"""containerd roots by slot and node: the images stay loaded for the next cluster."""
KUBELET_ROOT = Path("/var/lib/kvbench/kubelets")
"""Kubelet roots by slot and node, emptied with their node."""
_IMAGE_CACHE = Path("/var/cache/kvbench/node-images")
_READY_TIMEOUT = 120.0


def taint_strings(taints: list[dict]) -> list[str]:
    return [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in taints]


def _kubelet_labels(spec: NodeSpec) -> dict[str, str]:
    """The labels a kubelet may set on its own node: not kubernetes.io's, which it sets itself
    (hostname, os, arch) or may not set at all."""
    return {k: v for k, v in spec.all_labels().items() if "kubernetes.io/" not in k}


class NodeFleet:
    """Every node of one cluster; `start` after the control plane, `stop` before it."""

    def __init__(
        self,
        plan: NetworkPlan,
        specs: Sequence[NodeSpec],
        binaries: Binaries,
        workdir: Path,
        say: Say,
    ) -> None:
        self.plan, self.specs, self.binaries, self.workdir = plan, list(specs), binaries, workdir
        self.say = say
        self.nodes: list[RealNode] = []
        self.dns: ManagedProcess | None = None
        self.images: NodeImages | None = None
        self.timings: dict[str, float] = {}
        """Seconds each start step took (images, runtimes, loads, kubelets, Ready)."""

    def node(self, name: str) -> RealNode:
        found = [node for node in self.nodes if node.name == name]
        if not found:
            raise KeyError(f"no real node {name}: {[n.name for n in self.nodes]}")
        return found[0]

    def network_up(self) -> None:
        """The host bridge, before the apiserver binds its address."""
        bridge_up(self.plan, len(self.specs))

    def start(
        self, files: dict[str, NodeFiles], admin_kubeconfig: Path, api: kubernetes.client.ApiClient
    ) -> None:
        began = time.monotonic()
        self.say("building or finding the nodes' images (docker build: minutes the first time)")
        self.images = node_images(self.binaries.pause, _IMAGE_CACHE)
        self.timings["images"] = time.monotonic() - began
        for index, spec in enumerate(self.specs):
            node = RealNode(
                self.plan, index, len(self.specs), spec.name, _kubelet_labels(spec),
                taint_strings(spec.taints), self.binaries, files[spec.name], PAUSE_IMAGE,
            )  # fmt: skip
            self.nodes.append(node)
        step = time.monotonic()
        for node in self.nodes:
            node.start_runtime()
        self.timings["runtimes"] = time.monotonic() - step
        step = time.monotonic()
        wanted = set(self.images.references)
        for node in self.nodes:
            held = node.runtime.image_names()
            if node.runtime.loaded() != self.images.archive.name or wanted - held:
                self.say(f"loading {self.images.archive.name} into {node.name}'s containerd")
                node.load_images(self.images.archive)
                node.runtime.forget({r for r in held - wanted if not r.startswith("sha256:")})
        self.timings["image loads"] = time.monotonic() - step
        self._start_dns(admin_kubeconfig, api)
        self._publish_proxy_config(kubernetes.client.CoreV1Api(api))
        step = time.monotonic()
        for node in self.nodes:
            node.start_kubelet()
        core = kubernetes.client.CoreV1Api(api)
        names = ", ".join(node.name for node in self.nodes)
        self.say(f"waiting for Ready nodes {names} (up to {_READY_TIMEOUT:.0f}s)")
        deadline = time.monotonic() + _READY_TIMEOUT
        while not self._ready(core):
            failed = [f for node in self.nodes for f in node.failures()]
            if failed or time.monotonic() > deadline:
                raise RuntimeError("nodes not Ready:\n" + ("\n".join(failed) or self.diagnostics()))
            time.sleep(0.5)
        self.timings["kubelets to Ready"] = time.monotonic() - step
        self._advertise(core)

    def _ready(self, core: kubernetes.client.CoreV1Api) -> bool:
        ready = {
            node.metadata.name
            for node in core.list_node().items
            for c in node.status.conditions or []
            if c.type == "Ready" and c.status == "True"
        }
        return all(node.name in ready for node in self.nodes)

    def _advertise(self, core: kubernetes.client.CoreV1Api) -> None:
        """Each node's pod range (its CNI bridge's) and its GPUs, as an extended resource in
        its status: what the node IPAM controller and NVIDIA's device plugin would write."""
        for index, spec in enumerate(self.specs):
            cidr = self.plan.pod_cidr(index)
            core.patch_node(spec.name, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
            if spec.gpus:
                patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu",
                          "value": str(spec.gpus)}]  # fmt: skip
                core.patch_node_status(spec.name, patch)  # a list: a JSON patch
        deadline = time.monotonic() + _READY_TIMEOUT
        while not self._gpus_allocatable(core):  # the kubelet copies them at its next sync
            if time.monotonic() > deadline:
                raise RuntimeError("the kubelets never made the GPUs allocatable")
            time.sleep(0.5)

    def _gpus_allocatable(self, core: kubernetes.client.CoreV1Api) -> bool:
        wanted = {spec.name: str(spec.gpus) for spec in self.specs if spec.gpus}
        found = {
            node.metadata.name: (node.status.allocatable or {}).get("nvidia.com/gpu")
            for node in core.list_node().items
        }
        return all(found.get(name) == count for name, count in wanted.items())

    def _start_dns(self, admin_kubeconfig: Path, api: kubernetes.client.ApiClient) -> None:
        """dnsmasq on the host's address, and the kube-dns Service in front of it."""
        state = self.workdir / "clusterdns"
        self.dns = ManagedProcess(
            "clusterdns",
            [
                sys.executable,
                "-m",
                "kvbench.testing.node.clusterdns",
                str(admin_kubeconfig),
                self.plan.host_ip,
                str(state),
            ],
            self.workdir / "logs" / "clusterdns.log",
        )
        self.dns.start()
        core = kubernetes.client.CoreV1Api(api)
        ports = [{"name": "dns", "port": 53, "protocol": "UDP"},
                 {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]  # fmt: skip
        service = {
            "metadata": {"name": "kube-dns", "namespace": "kube-system",
                         "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": self.plan.dns_service_ip, "ports": ports},
        }  # fmt: skip
        endpoints = {
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "subsets": [{"addresses": [{"ip": self.plan.host_ip}], "ports": ports}],
        }
        for create, body in (
            (core.create_namespaced_service, service),
            (core.create_namespaced_endpoints, endpoints),
        ):
            try:
                create("kube-system", body)
            except ApiException as err:
                if err.status != 409:
                    raise
        hosts = state / "hosts"
        self.dns.wait_until(
            lambda: "kubernetes.default.svc" in (hosts.read_text() if hosts.exists() else ""),
            30, "the cluster DNS's first records",
        )  # fmt: skip
        time.sleep(0.5)  # a dnsmasq that cannot bind its address has exited by now
        if not self.dns.running():
            raise RuntimeError(f"the cluster DNS stopped:\n{tail(state / 'dnsmasq.log', 5)}")

    def _publish_proxy_config(self, core: kubernetes.client.CoreV1Api) -> None:
        """kube-system/kube-proxy as kubeadm makes it: the configuration every node's
        kube-proxy runs with, where the operator reads the Service arm's balancing."""
        shared = yaml.safe_dump(kube_proxy_shared(self.plan.cluster_cidr), sort_keys=False)
        body = {"metadata": {"name": "kube-proxy", "labels": {"app": "kube-proxy"}},
                "data": {"config.conf": shared}}  # fmt: skip
        try:
            core.create_namespaced_config_map("kube-system", body)
        except ApiException as err:
            if err.status != 409:
                raise
            core.replace_namespaced_config_map("kube-proxy", "kube-system", body)

    def processes(self) -> list[ManagedProcess]:
        own = [self.dns] if self.dns else []
        return [*own, *(p for node in self.nodes for p in node.processes)]

    def diagnostics(self, lines: int = 30) -> str:
        parts = [node.diagnostics(lines) for node in self.nodes]
        if self.dns is not None:
            parts.append(f"--- clusterdns ---\n{tail(self.dns.log_path, lines)}")
        return "\n".join(parts)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.dns is not None:
            self.dns.stop()
        bridge_down(self.plan, len(self.specs))
