"""Pods reach the apiserver in-cluster, and `kubectl logs -f` follows a running container."""

from __future__ import annotations

import kubernetes
from harness_manifests import PROJECT_IMAGE, pod

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

IN_CLUSTER = """
import kubernetes
kubernetes.config.load_incluster_config()
print(kubernetes.client.VersionApi().get_code().git_version)
"""


def _phase(core: kubernetes.client.CoreV1Api, name: str, namespace: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def test_a_pod_uses_the_in_cluster_config_of_its_service_account(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    container = {"name": "main", "image": PROJECT_IMAGE, "command": ["python", "-c", IN_CLUSTER]}
    core.create_namespaced_pod(namespace, pod("client", container, restartPolicy="Never"))
    phase = wait_for(
        lambda: (
            _phase(core, "client", namespace) in ("Succeeded", "Failed")
            and _phase(core, "client", namespace)
        ),
        60,
        "the pod to finish",
    )
    logs = core.read_namespaced_pod_log("client", namespace)
    assert (phase, logs) == ("Succeeded", "v1.20.2\n")


def test_kubectl_logs_follow_streams_until_the_container_exits(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    # The container prints one line, then waits for a file only the test creates: kubectl
    # starts following while it runs, and must end by itself once it has exited.
    script = (
        "import os, time\n"
        "print('first', flush=True)\n"
        "while not os.path.exists('go'):\n"
        "    time.sleep(0.05)\n"
        "print('last', flush=True)\n"
    )
    container = {"name": "main", "image": PROJECT_IMAGE, "command": ["python", "-c", script]}
    core.create_namespaced_pod(namespace, pod("talker", container, restartPolicy="Never"))
    wait_for(lambda: core.read_namespaced_pod_log("talker", namespace), 60, "the first line")
    (uid,) = [p.metadata.uid for p in core.list_namespaced_pod(namespace).items]
    (workdir,) = cluster.pods_dir.glob(f"*_{uid}")
    follow = cluster.kubectl_popen("logs", "-f", "-n", namespace, "talker")
    try:
        assert follow.stdout is not None
        first = follow.stdout.readline()  # arrives while the container still runs
        (workdir / "work" / "go").touch()
        rest = follow.stdout.read()
        code = follow.wait(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert (first, rest, code) == ("first\n", "last\n", 0)
