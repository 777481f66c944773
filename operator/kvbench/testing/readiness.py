"""A pod's readiness flipped for real on the test cluster: its container's processes (seen on
this machine, found by their environment) are stopped until the kubelet's readiness probe fails
and the pod turns not Ready, then continued until it is Ready again, as a worker saturated for a
while is taken out of its Service and put back. By the end the pod is Ready, unchanged and
never restarted (the liveness probe allows 120 s, the readiness probe 30 s)."""

import os
import signal
from pathlib import Path

import kubernetes

from kvbench.kube.cluster.pods import ready
from kvbench.testing.wait import wait_for

__all__ = ["flip_readiness"]


def _pids_of(pod_ip: str) -> list[int]:
    """The processes of the pod with that IP (its containers carry POD_IP)."""
    wanted = f"POD_IP={pod_ip}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def flip_readiness(
    core: kubernetes.client.CoreV1Api, namespace: str, name: str, timeout: float = 120
) -> None:
    """Not Ready, then Ready again, by its readiness probe's own verdicts (blocking)."""
    pod = core.read_namespaced_pod(name, namespace)
    pids = _pids_of(pod.status.pod_ip)
    assert pids, f"no process of pod {namespace}/{name}"

    def is_ready() -> bool:
        return ready(core.read_namespaced_pod(name, namespace))

    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not is_ready(), timeout, f"{name} to fail its readiness probe")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_for(is_ready, timeout, f"{name} to be Ready again")
