"""The test cluster's nodes are real: kubelets on containerd, pods on the CNI network, Services
through kube-proxy's iptables rules, names through the cluster DNS. What a pod does here is what
it would do on a cluster; the stand-in node agent could show none of it."""

import ipaddress
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from scipy.stats import chisquare

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow
PROJECT_IMAGE = "ghcr.io/kvbench/kvbench:0.1.0"
BACKENDS = 4
NEW_CONNECTIONS = 800

ECHO = """
import http.server, os
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = os.environ["HOSTNAME"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", 8080), Echo).serve_forever()
"""

CLIENT = """
import collections, http.client, json, socket, sys
service, namespace, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
def ask(connection):
    connection.request("GET", "/")
    return connection.getresponse().read().decode()
fresh = collections.Counter()
for _ in range(count):
    connection = http.client.HTTPConnection(service, 80, timeout=10)
    fresh[ask(connection)] += 1
    connection.close()
kept = http.client.HTTPConnection(service, 80, timeout=10)
pinned = collections.Counter(ask(kept) for _ in range(100))
def addresses(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)})
    except socket.gaierror as err:
        return str(err)
print(json.dumps({
    "fresh": fresh, "pinned": pinned,
    "short": addresses(service),
    "full": addresses(f"{service}.{namespace}.svc.cluster.local"),
    "headless": addresses(f"{service}-pods.{namespace}.svc.cluster.local"),
    "missing": addresses(f"nothing.{namespace}.svc.cluster.local"),
}))
"""

RESTRICTED = {
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def _container(name: str, command: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": PROJECT_IMAGE,
        "command": command,
        "securityContext": RESTRICTED,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }


def _finished(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str:
    def done() -> str | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod.status.phase if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(done, 180, f"pod {name} to finish")


def test_nodes_are_kubelets_on_containerd_with_gpus_advertised(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api
) -> None:
    wide = cluster.kubectl("get", "nodes", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    rows = wide.stdout.splitlines()[1:]
    assert len(rows) == len(cluster.node_specs), wide.stdout
    assert all("containerd://1.6" in row and " Ready " in row for row in rows), wide.stdout
    for node in core.list_node().items:
        assert node.status.node_info.kubelet_version == "v1.20.2"
        spec = next(s for s in cluster.node_specs if s.name == node.metadata.name)
        allocatable = node.status.allocatable
        assert allocatable.get("nvidia.com/gpu", "0") == str(spec.gpus), allocatable
        assert node.metadata.labels.get("nvidia.com/gpu.present") == ("true" if spec.gpus else None)


def test_a_pod_runs_its_image_as_its_user_on_the_node_network(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    script = "id -u; touch /written 2>&1; grep nameserver /etc/resolv.conf"
    pod = {
        "metadata": {"name": "probe"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "containers": [_container("probe", ["sh", "-c", script])],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    assert _finished(core, namespace, "probe") == "Succeeded"
    found = core.read_namespaced_pod("probe", namespace)
    node = core.read_node(found.spec.node_name)
    assert ipaddress.ip_address(found.status.pod_ip) in ipaddress.ip_network(node.spec.pod_cidr)
    log = core.read_namespaced_pod_log("probe", namespace)  # through the kubelet's API
    uid, refused, nameserver = log.splitlines()
    assert uid == "10001"
    assert "Read-only file system" in refused
    assert nameserver == f"nameserver {cluster.fleet.plan.dns_service_ip}"


def test_each_node_keeps_its_own_pods_logs(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    # A kubelet's container GC removes every pod log directory it does not know: on one
    # /var/log/pods shared by the nodes, the others' GC removed a running pod's logs within a
    # minute, and `kubectl logs` read nothing.
    assert cluster.fleet is not None
    pod = {
        "metadata": {"name": "logged"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "containers": [_container("logged", ["echo", "logged"])],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    assert _finished(core, namespace, "logged") == "Succeeded"
    found = core.read_namespaced_pod("logged", namespace)
    directory = f"{namespace}_logged_{found.metadata.uid}"
    holders = [n.name for n in cluster.fleet.nodes if (n.pod_logs_dir / directory).is_dir()]
    assert holders == [found.spec.node_name]
    assert not (Path("/var/log/pods") / directory).exists()
    assert core.read_namespaced_pod_log("logged", namespace) == "logged\n"


def _echo(namespace: str, apps: kubernetes.client.AppsV1Api, core: Any) -> None:
    labels = {"app": "echo"}
    deployment = {
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": BACKENDS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            **_container("echo", ["python3", "-c", ECHO]),
                            "ports": [{"containerPort": 8080}],
                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        }
                    ]
                },
            },
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)
    port = [{"port": 80, "targetPort": 8080}]
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "echo"}, "spec": {"selector": labels, "ports": port}}
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "echo-pods"},
            "spec": {"selector": labels, "ports": port, "clusterIP": "None"},
        },
    )

    def all_ready() -> bool:
        found = apps.read_namespaced_deployment("echo", namespace)
        return (found.status.ready_replicas or 0) == BACKENDS

    wait_for(all_ready, 180, "every echo pod Ready")


def _proxied_endpoints(cluster: TestCluster, node: str, namespace: str, service: str) -> int:
    """How many endpoints kube-proxy on `node` has written into its rules for `service`
    (its KUBE-SVC chain's jumps to KUBE-SEP chains): it follows the EndpointSlices a moment
    after the pods are Ready."""
    assert cluster.fleet is not None
    netns = cluster.fleet.plan.netns(node)
    rules = subprocess.run(
        ["ip", "netns", "exec", netns, "iptables-save", "-t", "nat"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sum(
        1
        for rule in rules.splitlines()
        if rule.startswith("-A KUBE-SVC-")
        and f'--comment "{namespace}/{service}' in rule
        and "-j KUBE-SEP-" in rule
    )


def test_a_service_spreads_new_connections_and_keep_alive_pins_one(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    apps: kubernetes.client.AppsV1Api,
    namespace: str,
) -> None:
    """kube-proxy's iptables mode picks a backend per new connection, uniformly at random;
    a kept-alive connection stays with the backend it was given."""
    _echo(namespace, apps, core)
    wait_for(
        lambda: _proxied_endpoints(cluster, "cpu-node-0", namespace, "echo") == BACKENDS,
        60,
        "kube-proxy's rules to hold every echo pod",
    )
    client = {
        "metadata": {"name": "client"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "cpu-node-0"},
            "containers": [
                _container(
                    "client",
                    ["python3", "-c", CLIENT, "echo", namespace, str(NEW_CONNECTIONS)],
                )
            ],
        },
    }
    began = time.monotonic()
    core.create_namespaced_pod(namespace, client)
    phase = _finished(core, namespace, "client")
    log = core.read_namespaced_pod_log("client", namespace)
    assert phase == "Succeeded", log
    seen = json.loads(log.splitlines()[-1])
    print(f"{NEW_CONNECTIONS} new connections in {time.monotonic() - began:.0f} s: {seen}")
    pods = core.list_namespaced_pod(namespace, label_selector="app=echo").items
    names = sorted(p.metadata.name for p in pods)
    assert sorted(seen["fresh"]) == names, "every ready pod gets new connections"
    counts = [seen["fresh"][name] for name in names]
    assert sum(counts) == NEW_CONNECTIONS
    statistic, p_value = chisquare(counts)
    assert p_value > 0.001, f"not uniform: {counts} (chi-square {statistic:.1f}, p {p_value:.2g})"
    assert len(seen["pinned"]) == 1 and sum(seen["pinned"].values()) == 100, seen["pinned"]
    service_ip = core.read_namespaced_service("echo", namespace).spec.cluster_ip
    assert seen["short"] == seen["full"] == [service_ip]
    assert seen["headless"] == sorted(p.status.pod_ip for p in pods)
    assert "Name or service not known" in seen["missing"] or "not known" in seen["missing"]
