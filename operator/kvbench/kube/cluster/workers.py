"""The workers: fresh pods per run, waited for through a watch, checked after the window."""

import asyncio
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import kubernetes

from kvbench.api import EngineSpec, ExperimentSpec, RoutingArm
from kvbench.kube.cluster.api import WATCH_SLICE, KubeApi
from kvbench.kube.cluster.pods import ready, why_not_ready
from kvbench.kube.cluster.preflight import capacity_lock, gpu_shortfall_now
from kvbench.kube.manifests import ExperimentRef, worker_objects
from kvbench.kube.objects import selector_string
from kvbench.loadgen.counters import parse_metrics
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.runner.failures import (
    ImagePullFailed,
    NoCapacity,
    SpecNotRunnable,
    Unschedulable,
    WorkersNotReady,
)

__all__ = ["WorkerPods"]

_BIND_WAIT = 60.0
"""Seconds the capacity lock waits for new worker pods to be placed."""


def _ready_since(pod: Any) -> datetime | None:
    """When the pod's Ready condition last changed (for a Ready pod: when it became Ready)."""
    conditions = pod.status.conditions if pod.status is not None else None
    return next((c.last_transition_time for c in conditions or [] if c.type == "Ready"), None)


class WorkerPods:
    """One experiment's worker StatefulSets and their pods."""

    def __init__(self, api: KubeApi, experiment: ExperimentRef) -> None:
        self.api = api
        self.exp = experiment
        self._node_products: dict[str, str | None] = {}

    def names(self, spec: ExperimentSpec) -> list[str]:
        return [
            f"{self.exp.statefulset(pool.name)}-{i}"
            for pool in spec.workers
            for i in range(pool.replicas)
        ]

    async def pods(self) -> dict[str, Any]:
        pods = await self.api.call(
            self.api.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(self.exp.selector("worker")),
        )
        return {p.metadata.name: p for p in pods.items}

    async def start(
        self, spec: ExperimentSpec, variant: str, engine: EngineSpec
    ) -> list[WorkerInfo]:
        """Delete every worker pod at once and return the new ones once each is Ready."""
        expected = self.names(spec)
        async with capacity_lock():
            shortfall = await self.api.call(gpu_shortfall_now, self.api, spec, self.exp.uid)
            if shortfall is not None and shortfall.never:
                raise SpecNotRunnable([f"spec.workers: {shortfall.message}"])
            if shortfall is not None:
                raise NoCapacity(shortfall.message)
            await self._clear_strays(spec.timeouts.workers_ready_seconds)
            old = {name: pod.metadata.uid for name, pod in (await self.pods()).items()}
            for manifest in worker_objects(self.exp, spec, variant, engine):
                await self.api.call(self.api.objects.apply, manifest)
            for name, uid in old.items():
                await self.api.call(self.api.delete_pod, name, uid)
            await self._wait_bound(expected, set(old.values()), spec.timeouts.workers_ready_seconds)
        pods = await self._watch_ready(
            expected, set(old.values()), spec.timeouts.workers_ready_seconds
        )
        return [await self._info(pods[name], engine) for name in expected]

    async def _clear_strays(self, timeout: float) -> None:
        """Delete the worker pods no StatefulSet of now owns (a deleted StatefulSet's, still
        terminating) and wait until they are gone: a new StatefulSet of the same name cannot
        create its pods beside them, and the controller's back-off on that failure grows to
        minutes (seen on real kubelets, where a pod takes seconds to terminate)."""
        sets = await self.api.call(
            self.api.objects.apps.list_namespaced_stateful_set,
            self.exp.namespace,
            label_selector=selector_string(self.exp.selector("worker")),
        )
        owners = {s.metadata.uid for s in sets.items if s.metadata.deletion_timestamp is None}

        def stray(pod: Any) -> bool:
            refs = [r for r in pod.metadata.owner_references or [] if r.controller]
            return not refs or refs[0].uid not in owners

        strays = {name: pod.metadata.uid for name, pod in (await self.pods()).items() if stray(pod)}
        for name, uid in strays.items():
            await self.api.call(self.api.delete_pod, name, uid)
        deadline = time.monotonic() + timeout
        while strays and time.monotonic() < deadline:
            left = {p.metadata.uid for p in (await self.pods()).values()}
            strays = {name: uid for name, uid in strays.items() if uid in left}
            if strays:
                await asyncio.sleep(0.5)

    async def _wait_bound(self, expected: list[str], old_uids: set[str], timeout: float) -> None:
        """Until the scheduler has placed every new worker pod (then a next experiment's
        capacity check counts their GPUs); no longer than `timeout` (the readiness wait then
        says why a pod is not placed)."""
        deadline = time.monotonic() + min(timeout, _BIND_WAIT)
        while time.monotonic() < deadline:
            pods = await self.pods()
            if all(
                (pod := pods.get(name)) is not None
                and pod.metadata.uid not in old_uids
                and pod.spec.node_name
                for name in expected
            ):
                return
            await asyncio.sleep(0.5)

    async def _watch_ready(
        self, expected: list[str], old_uids: set[str], timeout: float
    ) -> dict[str, Any]:
        """The pods named `expected`, once each is a new start (a UID not in `old_uids`) and
        Ready; typed failures with every pod's reason after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        selector = selector_string(self.exp.selector("worker"))
        core = self.api.core
        current: dict[str, Any] = {}

        def fresh_ready() -> bool:
            return all(
                (p := current.get(name)) is not None and p.metadata.uid not in old_uids and ready(p)
                for name in expected
            )

        stop = threading.Event()

        def watch() -> None:
            listed = core.list_namespaced_pod(self.exp.namespace, label_selector=selector)
            current.update({p.metadata.name: p for p in listed.items})
            version = listed.metadata.resource_version
            while not fresh_ready() and not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                stream = kubernetes.watch.Watch().stream(
                    core.list_namespaced_pod,
                    self.exp.namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=max(1, int(min(remaining, WATCH_SLICE))),
                )
                for event in stream:
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    if event["type"] == "DELETED":
                        if (
                            current.get(pod.metadata.name) is not None
                            and current[pod.metadata.name].metadata.uid == pod.metadata.uid
                        ):
                            current.pop(pod.metadata.name)
                    else:
                        current[pod.metadata.name] = pod
                    if fresh_ready() or time.monotonic() >= deadline or stop.is_set():
                        return

        try:
            await self.api.call(watch)
        except asyncio.CancelledError:
            stop.set()  # the thread ends within one watch slice
            raise
        if fresh_ready():
            return current
        reasons: dict[str, str] = {}
        kinds = set()
        for name in expected:
            pod = current.get(name)
            if pod is not None and pod.metadata.uid in old_uids:
                kind, why = "old", "the previous pod is still terminating"
            elif pod is not None and ready(pod):
                continue
            else:
                kind, why = why_not_ready(pod)
            if kind in ("crash", "starting"):
                why += "\n" + await self.api.log_tail(name, 10, previous=kind == "crash")
            reasons[name] = why
            kinds.add(kind)
        message = f"workers not Ready within {timeout:g} s (timeouts.workersReady): " + "; ".join(
            f"{pod}: {why.splitlines()[0]}" for pod, why in reasons.items()
        )
        if "pull" in kinds:
            raise ImagePullFailed(reasons, message)
        if kinds == {"unschedulable"}:
            raise Unschedulable(reasons, message)
        raise WorkersNotReady(reasons, message)

    async def _gpu_product(self, node: str | None) -> str | None:
        if node is None:
            return None
        if node not in self._node_products:
            found = await self.api.call(self.api.core.read_node, node)
            self._node_products[node] = (found.metadata.labels or {}).get("nvidia.com/gpu.product")
        return self._node_products[node]

    async def _kv_tokens(self, pod: Any, port: int) -> int | None:
        """This start's KV cache size: vLLM's `cache_config_info`, else its log line."""
        url = f"http://{pod.status.pod_ip}:{port}/metrics"
        try:
            async with httpx.AsyncClient() as http:
                page = (await http.get(url, timeout=5.0)).text
            found = parse_metrics(pod.metadata.name, page).kv_cache_tokens
            if found is not None:
                return found
        except httpx.HTTPError:
            pass
        log = await self.api.call(
            self.api.core.read_namespaced_pod_log, pod.metadata.name, self.exp.namespace
        )
        for line in log.splitlines():
            if "GPU KV cache size:" in line:
                digits = line.split("GPU KV cache size:")[1].split("tokens")[0]
                return int(digits.replace(",", "").strip())
        return None

    async def _info(self, pod: Any, engine: EngineSpec) -> WorkerInfo:
        status = pod.status
        ready_at = _ready_since(pod)
        assert ready_at is not None, "a Ready pod"
        created: datetime = pod.metadata.creation_timestamp
        container = (status.container_statuses or [None])[0]
        base = f"http://{status.pod_ip}:{engine.port}"
        return WorkerInfo(
            name=pod.metadata.name,
            pool=pod.metadata.labels.get("kvbench.io/pool", ""),
            uid=pod.metadata.uid,
            node=pod.spec.node_name,
            image=container.image if container else None,
            gpu_product=await self._gpu_product(pod.spec.node_name),
            restart_count=container.restart_count if container else 0,
            base_url=base,
            metrics_url=f"{base}/metrics",
            kv_cache_tokens=await self._kv_tokens(pod, engine.port),
            startup_seconds=round((ready_at - created).total_seconds(), 3),
            ready_at=ready_at,
        )

    async def external(self, arm: RoutingArm) -> list[WorkerInfo]:
        """The Ready pods behind an external arm, whose counters kvbench reads."""
        assert arm.external is not None
        pods = await self.api.call(
            self.api.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(arm.external.pod_selector),
        )
        port = arm.external.metrics_port
        workers = []
        for pod in pods.items:
            if not ready(pod):
                continue
            container = (pod.status.container_statuses or [None])[0]
            base = f"http://{pod.status.pod_ip}:{port}"
            workers.append(
                WorkerInfo(
                    name=pod.metadata.name,
                    pool="external",
                    uid=pod.metadata.uid,
                    node=pod.spec.node_name,
                    image=container.image if container else None,
                    restart_count=container.restart_count if container else 0,
                    base_url=base,
                    metrics_url=f"{base}/metrics",
                    kv_cache_tokens=await self._kv_tokens(pod, port),
                    ready_at=_ready_since(pod),
                )
            )
        if not workers:
            raise WorkersNotReady({"external": f"no Ready pod matches {arm.external.pod_selector}"})
        return workers

    async def check(
        self, workers: list[WorkerInfo], lapses: dict[str, str] | None = None
    ) -> list[str]:
        """Which of `workers` restarted, were replaced, are gone, not Ready, lapsed from the
        Service's endpoints (`lapses`, by worker, from the window's watch), or were not Ready
        for a while since they became Ready (their Ready condition changed since then: seen
        even where no one watched, as by an operator restarted meanwhile); one line each."""
        if not workers:
            return []
        pods = await self.api.call(
            self.api.core.list_namespaced_pod, self.exp.namespace, label_selector=None
        )
        by_name = {p.metadata.name: p for p in pods.items}
        problems = []
        for worker in workers:
            pod = by_name.get(worker.name)
            if pod is None:
                problems.append(f"{worker.name}: gone")
                continue
            if pod.metadata.uid != worker.uid:
                problems.append(f"{worker.name}: replaced (UID {worker.uid} -> {pod.metadata.uid})")
                continue
            restarts = sum(c.restart_count for c in pod.status.container_statuses or [])
            if restarts > worker.restart_count:
                problems.append(f"{worker.name}: restarted {restarts - worker.restart_count}x")
            elif not ready(pod):
                problems.append(f"{worker.name}: not Ready")
            elif lapses and worker.name in lapses:
                problems.append(f"{worker.name}: {lapses[worker.name]}")
            elif (since := _ready_since(pod)) and worker.ready_at and since > worker.ready_at:
                problems.append(
                    f"{worker.name}: was not Ready for a while (Ready at "
                    f"{worker.ready_at:%H:%M:%S}, again since {since:%H:%M:%S} UTC)"
                )
        return problems

    async def logs(self, worker: WorkerInfo) -> str:
        return await self.api.call(
            self.api.core.read_namespaced_pod_log,
            worker.name,
            self.exp.namespace,
            tail_lines=200,
        )
