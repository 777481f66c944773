"""The fault driver: watches an experiment's status and does harm at the moment it names
(kills the operator pod, deletes or kills a pod of the run), keeping a log of what it did."""

import random
import time
from dataclasses import dataclass, field
from typing import Any

import kubernetes

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.kube.manifests import LABEL_COMPONENT, LABEL_EXPERIMENT
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import restart_operator
from kvbench.testing.node.processes import kill_pod_containers

__all__ = ["STEPS", "Driver", "Step"]


@dataclass(frozen=True)
class Step:
    """A moment of a run: the status stage that announces it, and how long after the
    announcement (seconds, drawn from the range) the fault lands."""

    name: str
    stage: str
    delay: tuple[float, float] = (0.0, 0.0)
    arm: str | None = None


STEPS = (
    Step("workers starting", "workers-starting"),
    Step("waiting for Ready", "workers-starting", (0.6, 1.5)),
    Step("router starting", "workers-ready", arm="router"),
    Step("warm-up", "load-running", (0.0, 0.3)),
    Step("measured window", "load-running", (1.0, 2.0)),
    Step("collecting", "collecting"),
    Step("writing the status", "recorded"),
)


@dataclass
class Driver:
    """Faults on one experiment, seeded."""

    cluster: TestCluster
    namespace: str
    name: str
    seed: int
    log: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        client = self.cluster.api_client()
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)

    def status(self) -> dict[str, Any]:
        body = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        return body.get("status") or {}

    def finished(self) -> bool:
        return self.status().get("phase") in ("Succeeded", "Failed")

    def wait_step(self, step: Step, timeout: float) -> dict[str, Any] | None:
        """The status once the experiment is at `step` (None if it finished first)."""
        deadline = time.monotonic() + timeout
        done = (self.status().get("progress") or {}).get("done", 0)
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("phase") in ("Succeeded", "Failed"):
                return None
            current = status.get("current") or {}
            arm_ok = step.arm is None or f".{step.arm}." in f".{current.get('id', '')}."
            if step.stage == "recorded":  # the record is in; the status is being written
                at = (status.get("progress") or {}).get("done", 0) > done
            else:
                at = current.get("stage") == step.stage and arm_ok
            if at:
                time.sleep(self.rng.uniform(*step.delay))
                return status
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} never reached {step.name}")

    def note(self, what: str, step: Step | None, status: dict[str, Any], **extra: Any) -> None:
        current = status.get("current") or {}
        self.log.append(
            {"fault": what, "step": step.name if step else None, "run": current.get("id"),
             "stage": current.get("stage"), "at": time.time(), **extra}
        )  # fmt: skip

    # faults

    def kill_operator(self, operator: dict[str, Any]) -> None:
        """Delete the operator's pod with no grace period and wait for its replacement."""
        restart_operator(self.cluster, operator, grace_period_seconds=0)

    def run_pods(self, role: str) -> list[Any]:
        """This experiment's running pods of component `role` (worker, load, router)."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL_EXPERIMENT}={self.name}"
        ).items
        return [
            p for p in pods
            if (p.metadata.labels or {}).get(LABEL_COMPONENT) == role
            and p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]  # fmt: skip

    def wait_measuring(self, pod: Any, timeout: float = 120) -> None:
        """Wait until the load generator `pod` says its warm-up is done: its measured window
        has begun (the stage `load-running` is announced when its Job is made, before the pod
        has even started: a fault then would land before the window)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace)
            if "warmup: " in log and " requests done" in log.split("warmup: ", 1)[1]:
                time.sleep(self.rng.uniform(0.0, 0.3))
                return
            time.sleep(0.05)
        raise TimeoutError(f"{pod.metadata.name} never began its measured window")

    def delete_pod(self, pod: Any) -> str:
        self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        return str(pod.metadata.uid)

    def kill_container(self, pod: Any) -> str:
        """SIGKILL the pod's container processes: the container fails with exit 137 as after
        an OOM kill."""
        uid = str(pod.metadata.uid)
        kill_pod_containers(uid, pod.metadata.name)
        return uid
