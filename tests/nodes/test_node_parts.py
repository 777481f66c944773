"""Pieces of the real nodes that need no cluster: addresses, image names, DNS records, CNI,
kube-proxy's configuration."""

import ipaddress
from types import SimpleNamespace as NS

import pytest
import yaml

from kvbench.kube.cluster.proxy import balancing_from_config
from kvbench.testing.node.clusterdns import dns_records
from kvbench.testing.node.images import normalized
from kvbench.testing.node.kubelet import kube_proxy_config, kube_proxy_shared
from kvbench.testing.node.network import NetworkPlan
from kvbench.testing.node.node import cni_config


def test_two_slots_share_no_address_and_a_slot_keeps_its_ranges_apart() -> None:
    first, second = NetworkPlan(slot=0), NetworkPlan(slot=1)
    for plan in (first, second):
        ranges = [plan.node_network, plan.cluster_cidr, plan.service_cidr]
        networks = [ipaddress.ip_network(r) for r in ranges]
        assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1 :])
        assert ipaddress.ip_address(plan.host_ip) in networks[0]
        assert ipaddress.ip_address(plan.node_ip(3)) in networks[0]
        assert ipaddress.ip_network(plan.pod_cidr(3)).subnet_of(networks[1])
        assert ipaddress.ip_address(plan.dns_service_ip) in networks[2]
    for a, b in zip(
        (first.node_network, first.cluster_cidr, first.service_cidr),
        (second.node_network, second.cluster_cidr, second.service_cidr),
        strict=True,
    ):
        assert not ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b))
    assert first.bridge != second.bridge and first.netns("n") != second.netns("n")
    with pytest.raises(ValueError):
        first.node_ip(200)


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("vllm/vllm-openai:v0.31.0", "docker.io/vllm/vllm-openai:v0.31.0"),
        ("busybox:1", "docker.io/library/busybox:1"),
        ("ghcr.io/kvbench/kvbench:0.1.0", "ghcr.io/kvbench/kvbench:0.1.0"),
        ("localhost/kvbench:src-1", "localhost/kvbench:src-1"),
        ("registry:5000/a/b:c", "registry:5000/a/b:c"),
    ],
)
def test_image_names_are_compared_as_containerd_stores_them(name: str, stored: str) -> None:
    assert normalized(name) == stored


def _service(name: str, cluster_ip: str | None, kind: str = "ClusterIP") -> NS:
    return NS(metadata=NS(name=name, namespace="ns"), spec=NS(type=kind, cluster_ip=cluster_ip))


def _endpoints(name: str, *addresses: tuple[str, str | None]) -> NS:
    found = [NS(ip=ip, hostname=host) for ip, host in addresses]
    return NS(metadata=NS(name=name, namespace="ns"), subsets=[NS(addresses=found)])


def test_dns_answers_services_headless_members_and_nothing_for_external_names() -> None:
    services = [
        _service("web", "10.96.0.20"),
        _service("pods", "None"),
        _service("away", None, "ExternalName"),
    ]
    endpoints = [
        _endpoints("web", ("10.64.1.2", None)),
        _endpoints("pods", ("10.64.1.3", "pods-0"), ("10.64.2.3", "pods-1")),
        _endpoints("away", ("10.64.1.9", None)),
    ]
    assert dns_records(services, endpoints) == [
        ("10.64.1.3", "pods-0.pods.ns.svc.cluster.local"),
        ("10.64.1.3", "pods.ns.svc.cluster.local"),
        ("10.64.2.3", "pods-1.pods.ns.svc.cluster.local"),
        ("10.64.2.3", "pods.ns.svc.cluster.local"),
        ("10.96.0.20", "web.ns.svc.cluster.local"),
    ]


def test_a_node_bridges_its_own_pod_range_without_masquerade() -> None:
    [bridge, _portmap] = cni_config("10.64.2.0/24")["plugins"]
    assert bridge["ipMasq"] is False and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.64.2.0/24"}]]


def test_kube_proxy_runs_what_its_configmap_tells_the_operator(tmp_path) -> None:
    """Every node's file is the shared ConfigMap text plus its own addresses, so the Service
    arm's reported balancing (read from the ConfigMap) is the mode the nodes run."""
    plan = NetworkPlan(slot=2)
    shared = kube_proxy_shared(plan.cluster_cidr)
    path = kube_proxy_config(shared, "gpu-node-0", plan.node_ip(0), tmp_path / "k", tmp_path / "c")
    own = yaml.safe_load(path.read_text())
    assert {k: own[k] for k in shared} == shared
    assert (own["hostnameOverride"], own["bindAddress"]) == ("gpu-node-0", plan.node_ip(0))
    reported = balancing_from_config(yaml.safe_dump(shared))
    assert (reported.mode, reported.policy) == (own["mode"], "random per connection")
