"""What stands between the load generator and the worker pods, per routing arm.

service          the experiment's ClusterIP Service (kube-proxy balances it)
router           a vllm-router Deployment and Service made for the run
prefix-affinity  nothing: the load generator hashes each prefix group to one pod
session-affinity nothing: the load generator sends each conversation to one pod
external         a front end the user runs
"""

import asyncio
import time
from urllib.parse import urlsplit

from kvbench.api import EngineSpec, ExperimentSpec, RoutingArm
from kvbench.kube.cluster.api import KubeApi
from kvbench.kube.cluster.pods import ready, why_not_ready
from kvbench.kube.manifests import (
    KV_EVENTS_PORT,
    LABEL_ATTEMPT,
    LABEL_RUN,
    ExperimentRef,
    router_objects,
)
from kvbench.kube.objects import selector_string
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.kv_events import KvEventFeed, kv_event_batches
from kvbench.runner.failures import WorkersNotReady

__all__ = ["KubeArms", "kv_event_feed"]

_VARIANT = "kvbench.io/variant"
"""The worker pods' label that names the variant they run (`worker_objects`)."""


def kv_event_feed(engine: EngineSpec, workers: list[WorkerInfo]) -> KvEventFeed:
    """Where a kv_aware router subscribes: each worker pod's publisher at its own address
    (`engine_args` has it bind `tcp://*:KV_EVENTS_PORT`), under the engine's block size and
    served model name."""
    endpoints = {
        w.base_url: f"tcp://{urlsplit(w.base_url).hostname}:{KV_EVENTS_PORT}" for w in workers
    }
    model = engine.served_model_name or engine.model
    return KvEventFeed(endpoints=endpoints, block_size=engine.block_tokens, model=model)


class KubeArms:
    """Opens one arm at a time for an experiment, and closes what it opened."""

    def __init__(self, api: KubeApi, experiment: ExperimentRef) -> None:
        self.api = api
        self.exp = experiment
        self.opened: ChildNames | None = None

    async def open(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        await self.close()
        port = spec.engine.port
        if arm.service is not None:
            await self._wait_endpoints(self.exp.service, {w.base_url for w in workers})
            url = f"http://{self.exp.service_host(self.exp.service)}:{port}"
            return UrlEndpoint(arm=arm.name, url=url)
        if arm.affinity:
            return PodsEndpoint(arm=arm.name, pods={w.name: w.base_url for w in workers})
        if arm.external is not None:
            return UrlEndpoint(arm=arm.name, url=arm.external.url)
        assert arm.router is not None
        feed = None
        if arm.router.policy == "kv_aware":
            feed = await self._kv_event_feed(spec, workers)
        manifests = router_objects(self.exp, arm.router, names, [w.base_url for w in workers], feed)
        for manifest in manifests:
            await self.api.call(self.api.objects.apply, manifest)
        self.opened = names
        await self._wait_router(names, spec.timeouts.workers_ready_seconds)
        url = f"http://{self.exp.service_host(names.arm)}:8000"
        return UrlEndpoint(arm=arm.name, url=url)

    async def _kv_event_feed(self, spec: ExperimentSpec, workers: list[WorkerInfo]) -> KvEventFeed:
        """Each worker pod's publisher (`tcp://POD_IP:PORT`), and the block size and model of
        the variant the pods run, which their label names."""
        pods = await self.api.call(
            self.api.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(self.exp.selector("worker")),
        )
        wanted = {w.name for w in workers}
        variants = {
            (p.metadata.labels or {}).get(_VARIANT) for p in pods.items if p.metadata.name in wanted
        }
        if len(variants) != 1 or None in variants:
            raise RuntimeError(f"kv_aware: the worker pods run variants {variants}, not one")
        [variant] = variants
        return kv_event_feed(spec.engines()[variant], workers)

    async def kv_events(
        self, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> dict[str, int] | None:
        """The KV event batches a kv_aware router received from each worker, from its pod's
        log (the router writes one line per batch)."""
        if arm.router is None or arm.router.policy != "kv_aware":
            return None
        pods = await self.api.call(
            self.api.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(self._router_labels(names)),
        )
        if not pods.items:
            raise RuntimeError(f"{names.arm}: no router pod, its KV events uncounted")
        counts = dict.fromkeys((w.name for w in workers), 0)
        for pod in pods.items:
            log = await self.api.call(
                self.api.core.read_namespaced_pod_log,
                pod.metadata.name,
                self.exp.namespace,
                container="router",
            )
            for name, n in kv_event_batches(log, workers).items():
                counts[name] += n
        return counts

    async def _wait_endpoints(self, service: str, urls: set[str]) -> None:
        """Until the Service's ready endpoints are exactly these workers (the Service is
        the system under test: a load sent before it knows every pod would skew the first
        requests)."""
        wanted = {u.split("//")[1].split(":")[0] for u in urls}
        deadline = time.monotonic() + 60
        while True:
            found = await self.api.call(
                self.api.objects.endpoint_slice_addresses, self.exp.namespace, service
            )
            if found == wanted:
                return
            if time.monotonic() > deadline:
                raise WorkersNotReady(
                    {service: f"Service endpoints {sorted(found)} never became {sorted(wanted)}"}
                )
            await asyncio.sleep(0.2)

    def _router_labels(self, names: ChildNames) -> dict[str, str]:
        return {
            **self.exp.selector("router"),
            LABEL_RUN: str(names.index),
            LABEL_ATTEMPT: str(names.attempt),
        }

    async def _wait_router(self, names: ChildNames, timeout: float) -> None:
        selector = selector_string(self._router_labels(names))
        deadline = time.monotonic() + timeout
        while True:
            pods = await self.api.call(
                self.api.core.list_namespaced_pod, self.exp.namespace, label_selector=selector
            )
            up = [p for p in pods.items if ready(p)]
            if up:
                await self._wait_endpoints(names.arm, {f"http://{up[0].status.pod_ip}:8000"})
                return
            if time.monotonic() > deadline:
                reasons = {p.metadata.name: why_not_ready(p)[1] for p in pods.items}
                raise WorkersNotReady(reasons or {names.arm: "no router pod"})
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self.opened is None:
            return
        names, self.opened = self.opened, None
        for kind in ("Deployment", "Service"):
            await self.api.call(self.api.objects.delete, kind, names.arm, self.exp.namespace)
