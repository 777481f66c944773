"""What stands between the load generator and the worker pods, per routing arm.

service          the experiment's ClusterIP Service (kube-proxy balances it)
router           a vllm-router Deployment and Service made for the run
prefix-affinity  nothing: the load generator hashes each prefix group to one pod
external         a front end the user runs
"""

import asyncio
import time

from kvbench.api import ExperimentSpec, RoutingArm
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
from kvbench.runner.failures import WorkersNotReady

__all__ = ["KubeArms"]


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
            url = f"http://{self.exp.service}.{self.exp.namespace}.svc.cluster.local:{port}"
            return UrlEndpoint(arm=arm.name, url=url)
        if arm.prefix_affinity is not None:
            return PodsEndpoint(arm=arm.name, pods={w.name: w.base_url for w in workers})
        if arm.external is not None:
            return UrlEndpoint(arm=arm.name, url=arm.external.url)
        assert arm.router is not None
        sources = {}
        if arm.router.policy == "kv_aware":
            sources = {
                w.base_url: f"tcp://{w.base_url.split('//')[1].split(':')[0]}:{KV_EVENTS_PORT}"
                for w in workers
            }
        manifests = router_objects(
            self.exp, arm.router, names, [w.base_url for w in workers], sources
        )
        for manifest in manifests:
            await self.api.call(self.api.objects.apply, manifest)
        self.opened = names
        await self._wait_router(names, spec.timeouts.workers_ready_seconds)
        url = f"http://{names.arm}.{self.exp.namespace}.svc.cluster.local:8000"
        return UrlEndpoint(arm=arm.name, url=url)

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

    async def _wait_router(self, names: ChildNames, timeout: float) -> None:
        selector = selector_string(
            {
                **self.exp.selector("router"),
                LABEL_RUN: str(names.index),
                LABEL_ATTEMPT: str(names.attempt),
            }
        )
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
