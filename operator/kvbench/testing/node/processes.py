"""A pod's container processes, found on this machine: a real node's containers are processes
here (in their own namespaces), so a test can SIGKILL one as an OOM kill would."""

import os
import signal
from pathlib import Path

__all__ = ["kill_pod_containers", "pids_with_env"]


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment holds `name=value` (the downward API's POD_UID, ...)."""
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env:
            found.append(int(entry.name))
    return found


def kill_pod_containers(uid: str, name: str) -> list[int]:
    """SIGKILL the pod's container processes (found by POD_UID, else POD_NAME): each container
    fails with exit 137, the pod object stays. Returns the pids killed."""
    pids = pids_with_env("POD_UID", uid) or pids_with_env("POD_NAME", name)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids
