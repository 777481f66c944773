"""The load generator: a Job per run attempt that writes its result into ConfigMaps."""

import asyncio
import time
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from kvbench.api import ExperimentSpec
from kvbench.kube.cluster.api import WATCH_SLICE, KubeApi
from kvbench.kube.cluster.pods import exit_code
from kvbench.kube.manifests import LABEL_ATTEMPT, LABEL_RUN, ExperimentRef, load_job, load_objects
from kvbench.kube.objects import selector_string, status_reason
from kvbench.kube.results import read_result_document, result_configmap_names
from kvbench.loadgen.config import RunConfig
from kvbench.runner.cluster.base import ChildNames, LoadState
from kvbench.runner.failures import LoadFailed, RunTimeout

__all__ = ["LoadJobs"]

_STOP_WAIT = 20.0
"""Seconds a stopped load generator gets to write its partial result (its pod's deletion
grace period is 5 s)."""


def gpus_of(node: Any) -> dict[str, str]:
    """A node's allocatable GPUs (`nvidia.com/gpu`, `amd.com/gpu`, ...), those above zero."""
    allocatable = (node.status.allocatable or {}) if node.status else {}
    return {
        name: str(amount)
        for name, amount in allocatable.items()
        if name.endswith("/gpu") and str(amount) not in ("0", "")
    }


class LoadJobs:
    """One experiment's load-generator Jobs and what they leave."""

    def __init__(self, api: KubeApi, experiment: ExperimentRef) -> None:
        self.api = api
        self.exp = experiment
        self.placed: dict[str, dict[str, str]] = {}
        """What `wait` found of each attempt's placement (`placement`), by its prefix."""

    async def start(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        results = result_configmap_names(names.prefix)
        for manifest in load_objects(self.exp, names, config, results):
            if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] in results:
                await self.api.call(self._create_if_absent, manifest)
            else:
                await self.api.call(self.api.objects.apply, manifest)
        await self.api.call(self.api.objects.apply, load_job(self.exp, spec, names, results))

    def _create_if_absent(self, manifest: dict) -> None:
        """A result ConfigMap is created once: never overwrite what a Job already wrote."""
        try:
            self.api.core.create_namespaced_config_map(self.exp.namespace, manifest)
        except ApiException as err:
            if err.status != 409 or status_reason(err) != "AlreadyExists":
                raise  # a refusal (409 Conflict, 5xx) is retried by call

    async def _job(self, names: ChildNames) -> Any | None:
        try:
            return await self.api.call(
                self.api.batch.read_namespaced_job, names.load, self.exp.namespace
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    async def _document(self, names: ChildNames) -> bytes | None:
        return await self.api.call(
            read_result_document,
            self.api.core,
            self.exp.namespace,
            result_configmap_names(names.prefix),
        )

    async def state(self, names: ChildNames) -> LoadState:
        job = await self._job(names)
        document = await self._document(names)
        if document is not None:
            return LoadState(phase="succeeded", document=document)
        if job is None:
            return LoadState(phase="absent")
        for condition in job.status.conditions or []:
            if condition.type == "Failed" and condition.status == "True":
                return LoadState(
                    phase="failed",
                    reason=f"Job {names.load} failed: {condition.reason}: {condition.message}",
                )
            if condition.type == "Complete" and condition.status == "True":
                return LoadState(
                    phase="failed", reason=f"Job {names.load} completed without a result"
                )
        return LoadState(phase="running")

    async def placement(
        self, names: ChildNames, router: ChildNames | None = None
    ) -> dict[str, str] | None:
        """The nodes of the attempt's load generator and of the router it sends to (if any:
        the one `router` opened, by default its own run's), once the load generator is placed
        (None before), by role (`loadGenerator`, `router`). Either on a node with GPUs fails
        the attempt and stops its Job: their node affinity keeps them off the nodes GPU
        feature discovery labels, but not off a GPU node without that label; its allocatable
        says."""
        pods = [p for p in await self._pods(names) if p.spec.node_name]
        if not pods:
            return None
        opened = router or names
        selector = selector_string(
            {
                **self.exp.selector("router"),
                LABEL_RUN: str(opened.index),
                LABEL_ATTEMPT: str(opened.attempt),
            }
        )
        routers = await self.api.call(
            self.api.core.list_namespaced_pod, self.exp.namespace, label_selector=selector
        )
        placed = [("loadGenerator", pods[0])]
        placed += [("router", p) for p in routers.items if p.spec.node_name]
        for role, pod in placed:
            try:
                node = await self.api.call(self.api.core.read_node, pod.spec.node_name)
            except ApiException as err:
                if err.status != 404:
                    raise
                continue  # the node left the cluster: nothing to read
            gpus = gpus_of(node)
            if gpus:
                await self.api.call(self.api.objects.delete, "Job", names.load, self.exp.namespace)
                found = ", ".join(f"{n} {name}" for name, n in gpus.items())
                what = "the load generator" if role == "loadGenerator" else "the router"
                raise LoadFailed(
                    f"{what} ({pod.metadata.name}) was placed on node {pod.spec.node_name}, "
                    f"which has {found} allocatable: it would take CPU from the servers it "
                    "measures. Label that node nvidia.com/gpu.present=true (GPU feature "
                    "discovery does), or place the load generator with "
                    "spec.loadGenerator.nodeSelector"
                )
        return {role: pod.spec.node_name for role, pod in placed}

    async def wait(
        self, names: ChildNames, timeout: float, router: ChildNames | None = None
    ) -> bytes:
        """The attempt's result document, once its Job ends; its placement (`placement`,
        `router` as there) is checked as soon as its pod is placed, and kept in `placed`."""
        deadline = time.monotonic() + timeout
        selector = selector_string(
            {
                **self.exp.selector("loadgen"),
                LABEL_RUN: str(names.index),
                LABEL_ATTEMPT: str(names.attempt),
            }
        )

        def watch_job() -> None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            stream = kubernetes.watch.Watch().stream(
                self.api.batch.list_namespaced_job,
                self.exp.namespace,
                label_selector=selector,
                timeout_seconds=max(1, int(min(remaining, WATCH_SLICE))),
            )
            for event in stream:
                job = event["object"]
                if event["type"] == "DELETED" or any(
                    c.type in ("Complete", "Failed") and c.status == "True"
                    for c in job.status.conditions or []
                ):
                    return

        placed = None
        while True:
            if placed is None:
                placed = await self.placement(names, router)
                if placed is not None:
                    self.placed[names.prefix] = placed
            state = await self.state(names)
            if state.phase == "succeeded":
                assert state.document is not None
                return state.document
            if state.phase == "failed":
                document = await self._late_document(names)
                if document is not None:  # stopped (SIGTERM), it wrote what it measured
                    return document
                reason = state.reason or ""
                if "DeadlineExceeded" in reason:
                    raise RunTimeout(f"{reason} (timeouts.run)")
                raise LoadFailed(reason + "\n" + await self._log(names))
            if state.phase == "absent":
                raise LoadFailed(f"Job {names.load} is gone and left no result")
            if time.monotonic() >= deadline:
                document = await self._stop(names)
                if document is not None:
                    return document
                await self.release(names, keep=False)
                raise RunTimeout(f"Job {names.load} still running after {timeout:.0f} s: deleted")
            await self.api.call(watch_job)

    async def _pods(self, names: ChildNames) -> list[Any]:
        pods = await self.api.call(
            self.api.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=f"job-name={names.load}",
        )
        return list(pods.items)

    async def _stop(self, names: ChildNames) -> bytes | None:
        """Stop the attempt's load generator as its Job's deadline does (its pod deleted with
        its grace period: SIGTERM) and wait for the partial result it then writes."""
        for pod in await self._pods(names):
            await self.api.call(self.api.delete_pod, pod.metadata.name, pod.metadata.uid)
        deadline = time.monotonic() + _STOP_WAIT
        while time.monotonic() < deadline:
            document = await self._document(names)
            if document is not None:
                return document
            await asyncio.sleep(1.0)
        return None

    async def _late_document(self, names: ChildNames) -> bytes | None:
        """The partial result of a load generator its Job has just stopped (a deadline, a
        deleted pod): it may still be writing it while its pod terminates (exit 143)."""
        deadline = time.monotonic() + _STOP_WAIT
        while True:
            document = await self._document(names)
            if document is not None:
                return document
            stopping = any(
                pod.metadata.deletion_timestamp is not None or exit_code(pod) == 143
                for pod in await self._pods(names)
            )
            if not stopping or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(1.0)

    async def _log(self, names: ChildNames) -> str:
        pods = await self._pods(names)
        if not pods:
            return "(no load generator pod left)"
        return await self.api.log_tail(pods[0].metadata.name, 20)

    async def release(self, names: ChildNames, keep: bool) -> None:
        self.placed.pop(names.prefix, None)
        namespace = self.exp.namespace
        if not keep:
            await self.api.call(self.api.objects.delete, "Job", names.load, namespace)
        for kind, suffix in (
            ("ConfigMap", "config"),
            ("RoleBinding", "loadgen"),
            ("Role", "loadgen"),
        ):
            await self.api.call(
                self.api.objects.delete, kind, f"{names.prefix}-{suffix}", namespace
            )
