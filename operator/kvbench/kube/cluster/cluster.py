"""The Kubernetes back end: vLLM pods on GPU nodes, routers and load-generator Jobs.

Split by concern as the local back end is: `workers` (fresh pods per run, waited for
through a watch), `arms` (the Service, a router, affinity, external), `load` (a Job per
attempt that writes its result into ConfigMaps, so the result is on the cluster the moment
the Job ends, whoever watches) and `preflight` (what cannot run, free GPUs). Everything is
found again by label after an operator restart: nothing the runner relies on lives only in
this process.
"""

import kubernetes

from kvbench.api import Cleanup, EngineSpec, ExperimentSpec, RoutingArm, RunPlacement
from kvbench.kube.cluster.api import KubeApi
from kvbench.kube.cluster.arms import KubeArms
from kvbench.kube.cluster.endpoints import EndpointSlices, EndpointWatch
from kvbench.kube.cluster.load import LoadJobs
from kvbench.kube.cluster.preflight import kube_problems
from kvbench.kube.cluster.proxy import read_balancing
from kvbench.kube.cluster.workers import WorkerPods
from kvbench.kube.manifests import ExperimentRef
from kvbench.kube.objects import selector_string
from kvbench.loadgen.config import RunConfig
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    Cluster,
    LoadState,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.caches import reset_prefix_caches

__all__ = ["KubernetesCluster"]


class KubernetesCluster(Cluster):
    """One experiment's children in one namespace, through `client` (the operator's)."""

    def __init__(self, client: kubernetes.client.ApiClient, experiment: ExperimentRef) -> None:
        self.exp = experiment
        self.api = KubeApi(client, experiment.namespace)
        self.workers = WorkerPods(self.api, experiment)
        self.arms = KubeArms(self.api, experiment)
        self.load = LoadJobs(self.api, experiment)
        self.service_open = False
        """The open arm is the Service: its endpoints are watched through each window."""
        self.endpoints: EndpointWatch | None = None
        """The watch of the window under way, from the load's start until its check."""

    def problems(self, spec: ExperimentSpec) -> list[str]:
        return kube_problems(spec)

    def uses_simulator(self, spec: ExperimentSpec) -> bool:
        return spec.simulator.on_cluster

    async def recover(self, keep: ChildNames | None) -> None:
        def spare(kind: str, name: str) -> bool:
            return keep is not None and name.startswith(keep.prefix)

        namespace, objects = self.exp.namespace, self.api.objects
        await self.api.call(
            objects.delete_labelled,
            namespace,
            self.exp.selector("router"),
            ("Deployment", "Service"),
            spare,
        )
        jobs = await self.api.call(
            self.api.batch.list_namespaced_job,
            namespace,
            label_selector=selector_string(self.exp.selector("loadgen")),
        )
        for job in jobs.items:  # finished ones stay for the teardown (cleanup.keepJobs)
            finished = any(
                c.type in ("Complete", "Failed") and c.status == "True"
                for c in job.status.conditions or []
            )
            if not finished and not spare("Job", job.metadata.name):
                await self.api.call(objects.delete, "Job", job.metadata.name, namespace)
        if keep is None:
            await self.api.call(
                objects.delete_labelled, namespace, self.exp.selector("worker"), ("StatefulSet",)
            )

    async def start_workers(
        self,
        spec: ExperimentSpec,
        variant: str,
        engine: EngineSpec,
        arm: RoutingArm,
        names: ChildNames,
    ) -> list[WorkerInfo]:
        if arm.external is not None:
            return await self.workers.external(arm)
        return await self.workers.start(spec, variant, engine)

    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        await reset_prefix_caches(workers)

    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        endpoint = await self.arms.open(spec, arm, workers, names)
        self.service_open = arm.service is not None
        if self.service_open and isinstance(endpoint, UrlEndpoint):
            endpoint = endpoint.model_copy(update={"balancing": await read_balancing(self.api)})
        return endpoint

    async def close_arm(self) -> None:
        self._stop_watching()
        self.service_open = False
        await self.arms.close()

    async def start_load(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        if self.service_open and self.endpoints is None:
            slices = EndpointSlices(self.api.client, self.exp.namespace, self.exp.service)
            watch = EndpointWatch(slices)
            await self.api.call(watch.start)
            self.endpoints = watch
        await self.load.start(spec, config, names)

    def _stop_watching(self) -> EndpointWatch | None:
        watch, self.endpoints = self.endpoints, None
        if watch is not None:
            watch.stop()
        return watch

    async def load_state(self, names: ChildNames) -> LoadState:
        return await self.load.state(names)

    async def wait_load(self, names: ChildNames, timeout: float) -> bytes:
        return await self.load.wait(names, timeout, self.arms.opened)

    async def load_placement(self, arm: RoutingArm, names: ChildNames) -> RunPlacement | None:
        """The nodes `wait_load` found (read again for a load it did not see placed)."""
        placed = self.load.placed.get(names.prefix)
        if placed is None:
            placed = await self.load.placement(names, self.arms.opened)
        if placed is None:
            return None
        router = placed.get("router") if arm.router is not None else None
        return RunPlacement(load_generator=placed.get("loadGenerator"), router=router)

    async def release_load(self, names: ChildNames, keep: bool) -> None:
        self._stop_watching()
        await self.load.release(names, keep)

    async def check_workers(self, workers: list[WorkerInfo]) -> list[str]:
        watch = self._stop_watching()
        lapses = watch.problems(workers) if watch is not None else {}
        return await self.workers.check(workers, lapses)

    async def check_arm(
        self, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> dict[str, int] | None:
        return await self.arms.kv_events(arm, workers, names)

    async def worker_logs(self, worker: WorkerInfo) -> str:
        return await self.workers.logs(worker)

    async def detach(self) -> None:
        self._stop_watching()
        self.arms.opened = None

    async def teardown(self, cleanup: Cleanup) -> None:
        self._stop_watching()
        namespace = self.exp.namespace
        delete = self.api.objects.delete_labelled
        await self.api.call(
            delete, namespace, self.exp.selector("router"), ("Deployment", "Service")
        )
        kinds = ("ConfigMap", "RoleBinding", "Role", "ServiceAccount")
        if not cleanup.keep_jobs:
            kinds = ("Job", *kinds)
        await self.api.call(delete, namespace, self.exp.selector("loadgen"), kinds)
        if not cleanup.keep_workers:
            await self.api.call(delete, namespace, self.exp.selector("worker"), ("StatefulSet",))
            for component in ("workers", "service"):
                await self.api.call(delete, namespace, self.exp.selector(component), ("Service",))
