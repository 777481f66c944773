"""One real node of the test cluster: a network namespace with containerd, the kubelet and
kube-proxy in it, all below one cgroup (`NodeCgroup`), sharing the host's file system.

Why not nodes as privileged containers, as kind makes them: containerd inside a Docker
container needs its own non-overlay volume, a node image with its own cgroup set-up and a
second copy of every image inside each node container; a namespace per node gives the same
parts (a kubelet, a runtime, a CNI bridge, kube-proxy's own iptables, an address) with none of
that, and a node can still go away at once (its cgroup killed, its link cut).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from kvbench.procs import ManagedProcess, tail
from kvbench.testing.build import Binaries
from kvbench.testing.node.cgroups import NodeCgroup
from kvbench.testing.node.containerd import NodeContainerd
from kvbench.testing.node.kubelet import (
    KubeletSettings,
    kube_proxy_argv,
    kube_proxy_config,
    kube_proxy_shared,
    kubelet_argv,
    kubelet_config,
)
from kvbench.testing.node.network import NetworkPlan, NodeNetns, run_ip

__all__ = ["NodeFiles", "RealNode", "cni_config"]

_STATE_ROOT = Path("/run/kvbench")


class NodeFiles(BaseModel):
    """What the harness gives a node: credentials and where its files go."""

    workdir: Path
    """Per node: configs and logs."""
    kubelet_root: Path
    """The kubelet's root (pods' volumes, its sockets): a short path, as a socket's must be."""
    runtime_root: Path
    """containerd's root (images and snapshots), kept between clusters of this slot."""
    kubelet_kubeconfig: Path
    proxy_kubeconfig: Path
    ca_cert: Path
    serving_cert: Path
    serving_key: Path


def cni_config(pod_cidr: str) -> dict:
    """A bridge on cni0 with host-local addresses from the node's pod range; pods route
    everything through the node (which has no route out), no masquerade."""
    return {
        "cniVersion": "0.4.0",
        "name": "kvbench",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


class RealNode:
    """`start_runtime()`, load images, `start_kubelet()`; `stop()`."""

    def __init__(
        self,
        plan: NetworkPlan,
        index: int,
        count: int,
        name: str,
        labels: dict[str, str],
        taints: list[str],
        binaries: Binaries,
        files: NodeFiles,
        sandbox_image: str,
    ) -> None:
        self.plan, self.index, self.name = plan, index, name
        self.netns = NodeNetns(plan, index, name, count)
        self.cgroup = NodeCgroup(f"kvbench-{plan.slot}-{name}")
        self.binaries, self.files = binaries, files
        self.labels, self.taints = labels, taints
        self.state = _STATE_ROOT / f"{plan.slot}-{name}"
        work = files.workdir
        self.runtime = NodeContainerd(
            name, files.runtime_root, self.state / "containerd", work / "cni", sandbox_image
        )
        self.processes: list[ManagedProcess] = []

    @property
    def ip(self) -> str:
        return self.netns.ip

    @property
    def kubelet_root(self) -> Path:
        return self.files.kubelet_root

    @property
    def pod_logs_dir(self) -> Path:
        """Where this node's pods' logs go: its own, as a machine's /var/log/pods is."""
        return self.kubelet_root / "pod-logs"

    def start_runtime(self) -> None:
        """The network namespace, the cgroup and containerd: enough to load images."""
        self.cleanup()
        work = self.files.workdir
        for directory in (work / "cni", work / "logs", self.kubelet_root, self.state):
            directory.mkdir(parents=True, exist_ok=True)
        self.files.runtime_root.mkdir(parents=True, exist_ok=True)
        (work / "cni" / "10-kvbench.conflist").write_text(
            json.dumps(cni_config(self.plan.pod_cidr(self.index)), indent=1)
        )
        self.netns.create()
        self._start_containerd()

    def _start_containerd(self) -> None:
        self.cgroup.create()
        work = self.files.workdir
        config = self.runtime.write_config(work / "containerd.toml")
        containerd = self.runtime.process(self._prefix(), config, work / "logs" / "containerd.log")
        self._start(containerd)
        self.runtime.wait_ready(containerd)

    def load_images(self, archive: Path) -> None:
        """Import `archive` into this node's containerd; a failed import (the state an
        interrupted cluster left in the kept root, say) starts the runtime over on an empty
        root and imports once more."""
        try:
            self.runtime.load(archive)
        except RuntimeError as err:
            print(f"{self.name}: {err}; loading again into an empty containerd", flush=True)
            for process in reversed(self.processes):
                process.stop(timeout=5.0)
            self.processes.clear()
            self.cleanup()
            shutil.rmtree(self.files.runtime_root, ignore_errors=True)
            self.start_runtime()
            self.runtime.load(archive)

    def start_kubelet(self) -> None:
        """The kubelet and kube-proxy (images loaded first: nothing can be pulled)."""
        work = self.files.workdir
        settings = KubeletSettings(
            node=self.name,
            node_ip=self.ip,
            labels=self.labels,
            taints=self.taints,
            root_dir=self.kubelet_root,
            pod_logs_dir=self.pod_logs_dir,
            cgroup_root=self.cgroup.path,
            runtime_endpoint=self.runtime.endpoint,
            kubeconfig=self.files.kubelet_kubeconfig,
            ca_cert=self.files.ca_cert,
            serving_cert=self.files.serving_cert,
            serving_key=self.files.serving_key,
            cluster_dns=self.plan.dns_service_ip,
        )
        config = kubelet_config(settings, work / "kubelet.yaml")
        argv = kubelet_argv(self.binaries.kubelet, settings, config)
        self._start(ManagedProcess(f"{self.name}/kubelet", [*self._prefix(), *argv],
                                   work / "logs" / "kubelet.log"))  # fmt: skip
        proxy_config = kube_proxy_config(
            kube_proxy_shared(self.plan.cluster_cidr), self.name, self.ip,
            self.files.proxy_kubeconfig, work / "kube-proxy.yaml",
        )  # fmt: skip
        proxy = kube_proxy_argv(self.binaries.kube_proxy, proxy_config)
        self._start(ManagedProcess(f"{self.name}/kube-proxy", [*self._prefix(), *proxy],
                                   work / "logs" / "kube-proxy.log"))  # fmt: skip

    def _prefix(self) -> list[str]:
        return [*self.cgroup.join_command(), *self.netns.nsenter()]

    def _start(self, process: ManagedProcess) -> None:
        self.processes.append(process)
        process.start()

    def failures(self) -> list[str]:
        return [p.describe_failure() for p in self.processes if not p.running()]

    def diagnostics(self, lines: int = 30) -> str:
        return "\n".join(
            f"--- {p.name} ({'running' if p.running() else 'exited'}) ---\n"
            f"{tail(p.log_path, lines)}"
            for p in self.processes
        )

    def go_away(self) -> None:
        """The node vanishes at once, as a machine that lost its power or its network: its
        link is cut and everything below its cgroup (containerd, shims, kubelet, kube-proxy,
        every pod) is SIGKILLed; nothing tells the API server. Its disk stays."""
        run_ip("link", "set", self.plan.host_veth(self.index), "down")
        self.cgroup.kill()
        for process in reversed(self.processes):
            process.stop(timeout=5.0)  # reaps the killed
        self.processes.clear()

    def come_back(self) -> None:
        """The node boots again after `go_away()`: what lived in memory is gone (its runtime
        state, its volumes' mounts), its disk is as it was (images, the kubelet's pod
        directories), so the kubelet finds its pods' sandboxes dead and starts them again."""
        for root in (self.state, self.kubelet_root):
            _unmount_below(root)
        shutil.rmtree(self.state, ignore_errors=True)
        self.state.mkdir(parents=True)
        run_ip("link", "set", self.plan.host_veth(self.index), "up")
        self._start_containerd()
        self.start_kubelet()

    def stop(self) -> None:
        """Stop the node's daemons and pods, and remove all it set up but its images."""
        for process in reversed(self.processes):
            process.stop(timeout=5.0)
        self.processes.clear()
        self.cleanup()

    def cleanup(self) -> None:
        """What a node of this name in this slot left behind: processes, mounts, namespace."""
        self.cgroup.remove()
        for root in (self.kubelet_root, self.state):
            _unmount_below(root)
            shutil.rmtree(root, ignore_errors=True)
        self.netns.delete()


def _unmount_below(root: Path) -> None:
    """Unmount everything mounted at or below `root`, deepest first (volumes, rootfs)."""
    prefix = str(root.resolve()) if root.exists() else str(root)
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        points = [line.split()[4] for line in lines]
        for point in sorted({p for p in points if p == prefix or p.startswith(prefix + "/")},
                            key=len, reverse=True):  # fmt: skip
            subprocess.run(["umount", "-l", point], capture_output=True)
