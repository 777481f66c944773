"""What a pod's status says: Ready or not, and why not."""

from typing import Any

__all__ = ["PULL_ERRORS", "exit_code", "ready", "why_not_ready"]

PULL_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}


def exit_code(pod: Any) -> int | None:
    """The exit code of the pod's (first) container once it terminated."""
    for status in pod.status.container_statuses or []:
        if status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None


def ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def why_not_ready(pod: Any | None) -> tuple[str, str]:
    """(failure kind, reason) of a pod that is not Ready."""
    if pod is None:
        return "missing", "no pod was created"
    status = pod.status
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return "unschedulable", f"not scheduled: {condition.reason}: {condition.message}"
    for container in status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason in PULL_ERRORS:
            return "pull", f"{waiting.reason}: {waiting.message}"
        if waiting is not None and waiting.reason:
            last = container.last_state.terminated if container.last_state else None
            exit_text = f" (last exit {last.exit_code}: {last.reason})" if last else ""
            return "crash", f"{waiting.reason}{exit_text}, restarts {container.restart_count}"
        if container.state and container.state.running:
            return "starting", f"running for its start-up probe, restarts {container.restart_count}"
    return "pending", f"phase {status.phase}"
