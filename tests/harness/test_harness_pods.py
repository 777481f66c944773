"""Pod lifecycle on the test cluster: deletion, restarts, init containers, probes, scheduling."""

from __future__ import annotations

from pathlib import Path

import kubernetes
import pytest
from harness_manifests import PROJECT_IMAGE, echo_container, pod
from kubeio import http_get, pid_alive, pod_or_none

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

GPU = "nvidia.com/gpu"


def _ready(core: kubernetes.client.CoreV1Api, name: str, namespace: str) -> bool:
    found = pod_or_none(core, name, namespace)
    conditions = (found.status.conditions or []) if found else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _python(name: str, script: str) -> dict[str, object]:
    return {"name": name, "image": PROJECT_IMAGE, "command": ["python", "-c", script]}


def test_deleting_a_pod_stops_its_process_with_sigterm(
    core: kubernetes.client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    container = echo_container(
        env=[{"name": "MARKER", "value": "/marker/term"}],
        volumeMounts=[{"name": "marker", "mountPath": "/marker"}],
    )
    volume = {"name": "marker", "hostPath": {"path": str(tmp_path), "type": "Directory"}}
    core.create_namespaced_pod(namespace, pod("echo", container, volumes=[volume]))
    wait_for(lambda: _ready(core, "echo", namespace), 60, "a ready pod")
    ip = core.read_namespaced_pod("echo", namespace).status.pod_ip
    pid = int(http_get(ip, 8080, "/pid"))
    assert pid_alive(pid)

    core.delete_namespaced_pod("echo", namespace)

    wait_for(lambda: pod_or_none(core, "echo", namespace) is None, 60, "the pod to be removed")
    assert not pid_alive(pid)
    assert (tmp_path / "term").read_text() == "SIGTERM"
    with pytest.raises(OSError):
        http_get(ip, 8080, "/pid")


def test_a_process_ignoring_sigterm_is_killed_when_the_grace_period_ends(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(3600)\n"
    )
    core.create_namespaced_pod(
        namespace, pod("stubborn", _python("main", script), terminationGracePeriodSeconds=1)
    )
    pid = int(
        wait_for(lambda: core.read_namespaced_pod_log("stubborn", namespace).strip(), 60, "a pid")
    )
    assert pid_alive(pid)

    core.delete_namespaced_pod("stubborn", namespace)

    wait_for(lambda: pod_or_none(core, "stubborn", namespace) is None, 60, "the pod removed")
    assert not pid_alive(pid)


def test_restart_policy_always_restarts_and_keeps_the_previous_logs(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(
        namespace, pod("crash", _python("main", "print('crashing', flush=True); exit(1)"))
    )

    def restarted() -> kubernetes.client.V1ContainerStatus | None:
        status = core.read_namespaced_pod("crash", namespace).status.container_statuses[0]
        return status if status.restart_count >= 1 and status.last_state.terminated else None

    status = wait_for(restarted, 60, "a restart")
    assert status.last_state.terminated.exit_code == 1
    assert core.read_namespaced_pod("crash", namespace).status.phase == "Running"
    previous = cluster.kubectl("logs", "-n", namespace, "crash", "--previous")
    assert previous.returncode == 0, previous.stderr
    assert previous.stdout == "crashing\n"


def test_restart_policy_never_fails_the_pod_with_the_exit_code(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(
        namespace, pod("fail", _python("main", "exit(3)"), restartPolicy="Never")
    )
    wait_for(
        lambda: core.read_namespaced_pod("fail", namespace).status.phase == "Failed",
        60,
        "a failed pod",
    )
    status = core.read_namespaced_pod("fail", namespace).status.container_statuses[0]
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (3, "Error")
    assert status.restart_count == 0


def test_init_containers_run_first_and_share_an_empty_dir(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    mount = [{"name": "shared", "mountPath": "/shared"}]
    init = {
        **_python("init", "open('/shared/seed', 'w').write('from init')"),
        "volumeMounts": mount,
    }
    main = {**_python("main", "print(open('/shared/seed').read())"), "volumeMounts": mount}
    core.create_namespaced_pod(
        namespace,
        pod("seeded", main, initContainers=[init], restartPolicy="Never",
            volumes=[{"name": "shared", "emptyDir": {}}]),
    )  # fmt: skip
    wait_for(
        lambda: core.read_namespaced_pod("seeded", namespace).status.phase == "Succeeded",
        60,
        "a succeeded pod",
    )
    assert core.read_namespaced_pod_log("seeded", namespace, container="main") == "from init\n"
    assert not Path("/shared").exists()


def test_an_exec_probe_runs_inside_the_containers_mount_namespace(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "flag"}, "data": {"ready": "yes"}}
    )
    probe = {"exec": {"command": ["test", "-f", "/etc/kvbench-probe/ready"]}, "periodSeconds": 1}
    container = echo_container(
        readinessProbe=probe,
        volumeMounts=[{"name": "flag", "mountPath": "/etc/kvbench-probe", "readOnly": True}],
    )
    volumes = [{"name": "flag", "configMap": {"name": "flag"}}]
    core.create_namespaced_pod(namespace, pod("probed", container, volumes=volumes))
    wait_for(lambda: _ready(core, "probed", namespace), 60, "ready by the exec probe")
    assert not Path("/etc/kvbench-probe/ready").exists()  # not visible outside the pod
    ip = core.read_namespaced_pod("probed", namespace).status.pod_ip
    assert http_get(ip, 8080, "/file?p=/etc/kvbench-probe/ready") == "yes"


def test_an_image_without_a_local_stand_in_is_reported(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, pod("odd", {"name": "main", "image": "nginx:1.25"}))

    def waiting() -> kubernetes.client.V1ContainerStateWaiting | None:
        statuses = core.read_namespaced_pod("odd", namespace).status.container_statuses
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

    state = wait_for(lambda: (w := waiting()) and w.reason == "ErrImagePull" and w, 60, "error")
    assert "IMAGE_TABLE" in state.message and "nginx" in state.message


def test_the_scheduler_refuses_a_gpu_pod_when_no_node_has_a_free_gpu(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    node = next(n for n in cluster.nodes if n.gpus == 1)
    pinned = {"nodeSelector": {"kubernetes.io/hostname": node.name}}
    gpu = {"resources": {"limits": {GPU: "1"}}}
    core.create_namespaced_pod(namespace, pod("first", echo_container(**gpu), **pinned))
    wait_for(lambda: _ready(core, "first", namespace), 60, "the first GPU pod ready")
    core.create_namespaced_pod(namespace, pod("second", echo_container(**gpu), **pinned))
    too_big = {"resources": {"limits": {GPU: "2"}}}
    core.create_namespaced_pod(namespace, pod("too-big", echo_container(**too_big)))

    def unschedulable(name: str) -> str | None:
        conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
        return next(
            (c.message for c in conditions
             if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"),
            None,
        )  # fmt: skip

    assert "Insufficient nvidia.com/gpu" in wait_for(lambda: unschedulable("second"), 60, "refusal")
    assert "Insufficient nvidia.com/gpu" in wait_for(
        lambda: unschedulable("too-big"), 60, "refusal"
    )

    core.delete_namespaced_pod("first", namespace)
    wait_for(lambda: _ready(core, "second", namespace), 120, "the second pod on the freed GPU")
    assert core.read_namespaced_pod("second", namespace).spec.node_name == node.name


def test_a_failing_liveness_probe_restarts_the_container(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    health = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
    container = echo_container(
        startupProbe={**health, "failureThreshold": 60},  # liveness waits for startup
        livenessProbe={**health, "failureThreshold": 1},
    )
    core.create_namespaced_pod(namespace, pod("lively", container))
    wait_for(lambda: _ready(core, "lively", namespace), 60, "a ready pod")
    ip = core.read_namespaced_pod("lively", namespace).status.pod_ip
    first_pid = int(http_get(ip, 8080, "/pid"))

    http_get(ip, 8080, "/unready")  # /health now fails: liveness kills, the policy restarts

    def restarted() -> kubernetes.client.V1ContainerStatus | None:
        status = core.read_namespaced_pod("lively", namespace).status.container_statuses[0]
        return status if status.restart_count == 1 and status.ready else None

    status = wait_for(restarted, 60, "a restarted, ready container")
    assert status.last_state.terminated.exit_code == 137  # SIGKILL, as a runtime reports it
    assert not pid_alive(first_pid)
    assert int(http_get(ip, 8080, "/pid")) != first_pid
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=lively")
    told = {(e.reason, e.message) for e in events.items}
    assert ("Unhealthy", "Liveness probe failed") in told  # as `kubectl describe` shows
    assert ("Killing", "Container echo failed liveness probe, will be restarted") in told
    assert ("Started", "Started container echo") in told
