"""The test cluster runs real workloads: StatefulSets on GPU nodes, Jobs, Services."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import kubernetes
from harness_manifests import PROJECT_IMAGE, echo_container
from kubeio import http_get, ready_endpoint_ips

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

GPU = "nvidia.com/gpu"


def test_statefulset_pods_are_ready_with_their_own_ips_on_gpu_nodes(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    apps: kubernetes.client.AppsV1Api,
    namespace: str,
) -> None:
    probe = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    container = echo_container(readinessProbe=probe, resources={"limits": {GPU: "1"}})
    core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "engine"},
         "spec": {"clusterIP": "None", "selector": {"app": "engine"},
                  "ports": [{"name": "http", "port": 8080}]}},
    )  # fmt: skip
    apps.create_namespaced_stateful_set(
        namespace,
        {"metadata": {"name": "engine"},
         "spec": {"serviceName": "engine", "replicas": 2, "podManagementPolicy": "Parallel",
                  "selector": {"matchLabels": {"app": "engine"}},
                  "template": {"metadata": {"labels": {"app": "engine"}},
                               "spec": {"containers": [container]}}}},
    )  # fmt: skip

    wait_for(
        lambda: apps.read_namespaced_stateful_set("engine", namespace).status.ready_replicas == 2,
        120,
        "2 ready replicas",
    )

    pods = core.list_namespaced_pod(namespace, label_selector="app=engine").items
    assert sorted(p.metadata.name for p in pods) == ["engine-0", "engine-1"]
    gpu_nodes = {n.name: n for n in cluster.nodes if n.gpus}
    assert {p.spec.node_name for p in pods} == set(gpu_nodes)  # one GPU each: one pod per node
    assert len({p.status.pod_ip for p in pods}) == 2
    for p in pods:
        ip = ipaddress.ip_address(p.status.pod_ip)
        assert ip.is_loopback
        assert ip in ipaddress.ip_network(gpu_nodes[p.spec.node_name].pod_cidr)
        assert p.status.host_ip == gpu_nodes[p.spec.node_name].ip
        assert p.status.phase == "Running"
        assert {c.type: c.status for c in p.status.conditions}["Ready"] == "True"
        assert p.status.container_statuses[0].ready
        assert http_get(p.status.pod_ip, 8080, "/name") == p.metadata.name


def test_job_runs_to_completion_on_a_cpu_node_and_its_logs_are_readable(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    batch: kubernetes.client.BatchV1Api,
    namespace: str,
) -> None:
    core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "settings"},
         "data": {"greeting": "hello", "app.conf": "mode=test\n"}},
    )  # fmt: skip
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}}
    )
    script = "\n".join(
        [
            "import os, pathlib",
            "for name in ('GREETING', 'TOKEN', 'MESSAGE', 'POD_IP', 'NODE'):",
            "    print(f'{name}={os.environ[name]}')",
            "print('conf=' + pathlib.Path('/etc/kvbench-harness/settings/app.conf').read_text())",
            "sa = pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount/namespace')",
            "print('sa-namespace=' + sa.read_text())",
        ]
    )
    container = {
        "name": "work",
        "image": PROJECT_IMAGE,
        "command": ["python", "-c", script],
        "env": [
            {"name": "GREETING",
             "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "MESSAGE", "value": "$(GREETING) world"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "volumeMounts": [{"name": "settings", "mountPath": "/etc/kvbench-harness/settings"}],
    }  # fmt: skip
    no_gpu = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}]}}}  # fmt: skip
    batch.create_namespaced_job(
        namespace,
        {"metadata": {"name": "once"},
         "spec": {"backoffLimit": 0, "template": {"spec": {
             "restartPolicy": "Never", "affinity": no_gpu, "containers": [container],
             "volumes": [{"name": "settings", "configMap": {"name": "settings"}}]}}}},
    )  # fmt: skip

    wait_for(
        lambda: batch.read_namespaced_job("once", namespace).status.succeeded == 1,
        120,
        "a succeeded job",
    )

    (pod,) = core.list_namespaced_pod(namespace, label_selector="job-name=once").items
    cpu_nodes = {n.name for n in cluster.nodes if not n.gpus}
    assert pod.spec.node_name in cpu_nodes
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")

    logs = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert logs.splitlines() == [
        "GREETING=hello",
        "TOKEN=s3cret",
        "MESSAGE=hello world",
        f"POD_IP={pod.status.pod_ip}",
        f"NODE={pod.spec.node_name}",
        "conf=mode=test",
        "",
        f"sa-namespace={namespace}",
    ]
    via_kubectl = cluster.kubectl("logs", "-n", namespace, "job/once")
    assert via_kubectl.returncode == 0, via_kubectl.stderr
    assert via_kubectl.stdout == logs
    tail = cluster.kubectl("logs", "-n", namespace, "job/once", "--tail=1", "--timestamps")
    assert tail.stdout.rstrip().endswith(f" sa-namespace={namespace}")
    assert len(tail.stdout.splitlines()) == 1
    # The volume was bound in the pod's private mount namespace only: its mount point,
    # created on the host for the pod's lifetime, is gone with the pod's process.
    assert not Path("/etc/kvbench-harness").exists()


def test_a_service_spreads_new_connections_over_all_ready_pods(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    apps: kubernetes.client.AppsV1Api,
    namespace: str,
) -> None:
    apps.create_namespaced_deployment(
        namespace,
        {"metadata": {"name": "web"},
         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [echo_container()]}}}},
    )  # fmt: skip
    service = core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "web"},
         "spec": {"selector": {"app": "web"},
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
    )  # fmt: skip
    ip = service.spec.cluster_ip
    assert ipaddress.ip_address(ip).is_loopback

    pods = wait_for(
        lambda: [
            p for p in core.list_namespaced_pod(namespace, label_selector="app=web").items
            if p.status.pod_ip
        ] if len(ready_endpoint_ips(core.api_client, namespace, "web")) == 3 else None,
        120,
        "3 ready endpoints",
    )  # fmt: skip
    names = {p.metadata.name for p in pods}
    wait_for(lambda: http_get(ip, 80, "/name"), 30, "the service proxy's listener")
    seen = {http_get(ip, 80, "/name") for _ in range(60)}
    assert seen == names  # each of 3 pods missed by 60 random picks: p < 1e-10

    # A pod that stops being ready leaves the EndpointSlice, then gets no new connection.
    leaving = pods[0]
    http_get(leaving.status.pod_ip, 8080, "/unready")
    wait_for(
        lambda: leaving.status.pod_ip not in ready_endpoint_ips(core.api_client, namespace, "web"),
        60,
        "the unready pod to leave the endpoints",
    )
    # The proxy follows the EndpointSlices a moment later: wait for a batch of 30 new
    # connections that all avoid the pod (had the proxy kept it, p = (2/3)**30 < 1e-5).
    seen = wait_for(
        lambda: (
            (batch := {http_get(ip, 80, "/name") for _ in range(30)})
            and leaving.metadata.name not in batch
            and batch
        ),
        30,
        "connections that avoid the unready pod",
    )
    assert seen == names - {leaving.metadata.name}
