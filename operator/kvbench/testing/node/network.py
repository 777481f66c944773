"""The test cluster's network: a host bridge the nodes hang on, a network namespace per node,
and the routes that join every node's pod range.

    host bridge kvb<slot>      10.(128+slot).0.1/24  (the apiserver and cluster DNS listen here)
    node i, eth0 in its netns  10.(128+slot).0.(10+i)
    pods of node i (cni0)      10.(64+slot).(i+1).0/24, inside the cluster range 10.(64+slot).0.0/16
    Services                   10.(96+slot).0.0/16: `kubernetes` .0.1, cluster DNS .0.10

All of it stays inside this machine: no masquerade and no default route, in the nodes or for
the pods; the host reaches every pod range through its node (the routes kindnet would add).
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

__all__ = ["NetworkPlan", "NodeNetns", "bridge_down", "bridge_up", "run_ip"]

MAX_NODES = 200


class NetworkPlan(BaseModel):
    """The address ranges of the cluster in one slot (`kvbench.testing.slots`)."""

    slot: int = Field(ge=0, lt=32)

    @property
    def bridge(self) -> str:
        return f"kvb{self.slot}"

    @property
    def host_ip(self) -> str:
        """The host's address on the node network: the apiserver's advertised address."""
        return f"10.{128 + self.slot}.0.1"

    @property
    def node_network(self) -> str:
        return f"10.{128 + self.slot}.0.0/24"

    def node_ip(self, index: int) -> str:
        if not 0 <= index < MAX_NODES:
            raise ValueError(f"node index {index} outside 0..{MAX_NODES - 1}")
        return f"10.{128 + self.slot}.0.{10 + index}"

    @property
    def cluster_cidr(self) -> str:
        return f"10.{64 + self.slot}.0.0/16"

    def pod_cidr(self, index: int) -> str:
        return f"10.{64 + self.slot}.{index + 1}.0/24"

    @property
    def service_cidr(self) -> str:
        return f"10.{96 + self.slot}.0.0/16"

    @property
    def kubernetes_service_ip(self) -> str:
        return f"10.{96 + self.slot}.0.1"

    @property
    def dns_service_ip(self) -> str:
        return f"10.{96 + self.slot}.0.10"

    def netns(self, node: str) -> str:
        return f"kvb{self.slot}-{node}"

    def host_veth(self, index: int) -> str:
        return f"kvb{self.slot}n{index}"


def run_ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """`ip ARGS` on the host, or in `netns`; raises with ip's own message."""
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _sysctl(path: str, value: str, netns: str | None = None) -> None:
    """A sysctl of the host or of `netns` (network sysctls are per namespace)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    done = subprocess.run(
        [*prefix, "sh", "-c", f"echo {value} > /proc/sys/{path}"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"sysctl {path}={value} in {netns or 'the host'}: {done.stderr}")


def _forward_rule(plan: NetworkPlan) -> list[str]:
    """Frames between two nodes cross the host bridge, and with br_netfilter on (Docker turns
    it on) the host's FORWARD chain sees them; Docker's policy there is DROP."""
    return ["FORWARD", "-i", plan.bridge, "-o", plan.bridge, "-j", "ACCEPT"]


def bridge_up(plan: NetworkPlan, node_count: int) -> None:
    """The host bridge with the host's address, and a route to each node's pod range."""
    bridge_down(plan, node_count)
    run_ip("link", "add", plan.bridge, "type", "bridge")
    run_ip("addr", "add", f"{plan.host_ip}/24", "dev", plan.bridge)
    run_ip("link", "set", plan.bridge, "up")
    subprocess.run(["iptables", "-I", *_forward_rule(plan)], check=True)
    for index in range(node_count):
        run_ip("route", "replace", plan.pod_cidr(index), "via", plan.node_ip(index))


def bridge_down(plan: NetworkPlan, node_count: int) -> None:
    """Undo `bridge_up` (also what an earlier cluster of this slot left)."""
    for index in range(node_count):
        run_ip("route", "del", plan.pod_cidr(index), check=False)
    while (
        subprocess.run(["iptables", "-D", *_forward_rule(plan)], capture_output=True).returncode
        == 0
    ):
        pass
    run_ip("link", "del", plan.bridge, check=False)


class NodeNetns:
    """One node's network namespace: eth0 on the host bridge, forwarding on, bridged pod
    traffic seen by iptables (kube-proxy's rules apply to pods of the same node), and a route
    to every other node's pod range; no default route."""

    def __init__(self, plan: NetworkPlan, index: int, name: str, node_count: int) -> None:
        self.plan, self.index, self.node_count = plan, index, node_count
        self.name = plan.netns(name)
        self.ip = plan.node_ip(index)

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.name

    def create(self) -> None:
        self.delete()
        plan, veth = self.plan, self.plan.host_veth(self.index)
        run_ip("netns", "add", self.name)
        run_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        run_ip("link", "set", veth, "master", plan.bridge, "up")
        run_ip("link", "set", "lo", "up", netns=self.name)
        run_ip("addr", "add", f"{self.ip}/24", "dev", "eth0", netns=self.name)
        run_ip("link", "set", "eth0", "up", netns=self.name)
        for other in range(self.node_count):
            if other != self.index:
                run_ip(
                    "route", "add", plan.pod_cidr(other), "via", plan.node_ip(other),
                    netns=self.name,
                )  # fmt: skip
        # The node's own processes reach Service addresses (kube-proxy DNATs them in OUTPUT,
        # after routing): the range needs a route, as a node's default route gives it.
        run_ip("route", "add", plan.service_cidr, "dev", "eth0", netns=self.name)
        _sysctl("net/ipv4/ip_forward", "1", self.name)
        with contextlib.suppress(RuntimeError):  # without br_netfilter: no same-node hairpin
            _sysctl("net/bridge/bridge-nf-call-iptables", "1", self.name)

    def delete(self) -> None:
        run_ip("link", "del", self.plan.host_veth(self.index), check=False)
        run_ip("netns", "del", self.name, check=False)

    def nsenter(self) -> list[str]:
        """The prefix that runs a program in this node's network namespace and nothing else:
        the kubelet and containerd must share the host's mounts (`ip netns exec` would give
        each a mount namespace of its own, and the kubelet's volumes would not reach the
        containers)."""
        return ["nsenter", f"--net={self.path}", "--"]
