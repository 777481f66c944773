"""Pods reach the apiserver in-cluster, keep their mounts while another node agent of the
machine lets go of the same target, and `kubectl logs -f` follows a running container."""

from __future__ import annotations

import uuid
from pathlib import Path

import kubernetes
from harness_manifests import PROJECT_IMAGE, pod

from kvbench.testing.cluster import TestCluster
from kvbench.testing.volumes import Mount, MountPoints
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


def test_a_pod_keeps_its_mount_when_another_agent_releases_the_same_target(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    # The race behind a flaky in-cluster config: every test cluster of the machine mounts the
    # token at one host path, and the agent that created it removed it when its own last pod
    # stopped, unmounting it in another cluster's running pod. Here the other agent is this
    # test: it creates the target, the cluster's pod mounts it, the test lets go of it, and the
    # pod must still read its file; the cluster's agent, the last user, removes it after.
    target = Path(f"/var/lib/kvbench-shared-target-{uuid.uuid4().hex[:8]}/token")
    other_agent = MountPoints()
    mount = Mount(source=tmp_path, target=target)
    other_agent.acquire(mount)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "token"}, "data": {"token": "secret"}}
    )
    script = (
        "import os, time\n"
        "print('mounted', flush=True)\n"
        "while not os.path.exists('go'):\n"
        "    time.sleep(0.05)\n"
        f"print(open('{target}/token').read(), flush=True)\n"
    )
    container = {
        "name": "main",
        "image": PROJECT_IMAGE,
        "command": ["python", "-c", script],
        "volumeMounts": [{"name": "token", "mountPath": str(target)}],
    }
    volumes = [{"name": "token", "configMap": {"name": "token"}}]
    core.create_namespaced_pod(
        namespace, pod("reader", container, restartPolicy="Never", volumes=volumes)
    )
    wait_for(lambda: core.read_namespaced_pod_log("reader", namespace), 60, "the pod to mount")
    other_agent.release(mount)
    (uid,) = [p.metadata.uid for p in core.list_namespaced_pod(namespace).items]
    (workdir,) = cluster.pods_dir.glob(f"*_{uid}")
    (workdir / "work" / "go").touch()
    phase = wait_for(
        lambda: (
            (_phase(core, "reader", namespace) in ("Succeeded", "Failed"))
            and _phase(core, "reader", namespace)
        ),
        60,
        "the pod to finish",
    )
    logs = core.read_namespaced_pod_log("reader", namespace)
    assert (phase, logs) == ("Succeeded", "mounted\nsecret\n")
    wait_for(lambda: not target.parent.exists(), 30, f"{target.parent} to be removed")


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
