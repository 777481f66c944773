"""One experiment resource carried out by the runner, as the operator's daemon does it.

This is the reconciling logic; the kopf handlers only call it. The resource's spec is read
with the API models (an invalid one fails the experiment naming the field, with no child
made); the results store in ConfigMaps is the source of truth, so a restarted operator
continues from it; a finished experiment is never run again; a spec changed after the start
is refused with a condition and the experiment goes on with the spec it started with.
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import kubernetes
from pydantic import ValidationError

from kvbench import __version__
from kvbench.api import (
    API_VERSION,
    KIND,
    BenchmarkExperiment,
    Condition,
    ExperimentPhase,
    ExperimentStatus,
    SpecError,
    parse_experiment,
)
from kvbench.kube.cluster import KubernetesCluster
from kvbench.kube.manifests import ExperimentRef
from kvbench.kube.store import ConfigMapStore
from kvbench.kube.trace import configmap_trace
from kvbench.loadgen.workload.mooncake import TraceError
from kvbench.operator.metrics import ExperimentMetrics, OperatorMetrics
from kvbench.operator.status import ResourceStatus
from kvbench.runner import ExperimentRunner, StoreMismatch
from kvbench.runner.failures import Forbidden, SpecNotRunnable
from kvbench.runner.observers import FanOut

__all__ = ["IMAGE_ENV", "ExperimentController", "project_image"]

IMAGE_ENV = "KVBENCH_IMAGE"
_IMMUTABLE = (
    "the spec changed after the experiment started; it goes on with the spec it started "
    "with (delete and re-create it to change it)"
)
log = logging.getLogger(__name__)


def project_image() -> str:
    """The image the operator runs (the chart sets it): also the load generator's and the
    simulator's unless the spec names another."""
    return os.environ.get(IMAGE_ENV, f"ghcr.io/kvbench/kvbench:{__version__}")


def _stored_status(stored: dict[str, Any]) -> ExperimentStatus:
    """The status on the resource, for the metrics of an experiment seen at daemon start (one
    another operator version wrote and this one cannot read counts by its phase alone)."""
    try:
        return ExperimentStatus.model_validate(stored)
    except ValidationError:
        phase = stored.get("phase")
        known = phase in {p.value for p in ExperimentPhase}
        return ExperimentStatus(phase=phase if known else ExperimentPhase.PENDING)


def _owner(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class ExperimentController:
    """Runs experiments through `client` (the operator's API access), into `metrics`."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        image: str | None = None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.client = client
        self.image = image or project_image()
        self.metrics = metrics or OperatorMetrics()
        self.core = kubernetes.client.CoreV1Api(client)
        self._running: dict[str, ResourceStatus] = {}
        """The status writer of every experiment under way, by UID: a condition set from
        another handler must go through it, or its next patch would drop it."""

    def _parse(self, body: dict[str, Any]) -> BenchmarkExperiment:
        meta = body["metadata"]
        document = {
            "apiVersion": body.get("apiVersion", API_VERSION),
            "kind": body.get("kind", KIND),
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "generation": meta.get("generation"),
            },
            "spec": body.get("spec") or {},
        }
        return parse_experiment(document, f"{meta.get('namespace')}/{meta['name']}")

    async def run(self, body: dict[str, Any], stopped: Callable[[], Awaitable[bool]]) -> None:
        """Carry the experiment out until it ends or `stopped()` returns (then True: the
        resource was deleted, tear down; False: the operator is exiting, detach)."""
        meta = body["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        status = ResourceStatus(self.client, namespace, name, uid)
        status.generation = meta.get("generation")
        stored = body.get("status") or {}
        status.conditions = [Condition.model_validate(c) for c in stored.get("conditions", [])]
        metrics = self.metrics.experiment(namespace, name)
        metrics.status(_stored_status(stored))
        if stored.get("phase") in (ExperimentPhase.SUCCEEDED, ExperimentPhase.FAILED):
            return
        try:
            experiment = self._parse(body)
        except SpecError as err:
            await self._fail(status, metrics, "InvalidSpec", str(err))
            return
        ref = ExperimentRef(name=name, namespace=namespace, uid=uid, image=self.image)
        store = ConfigMapStore(self.core, namespace, name, uid, _owner(name, uid))
        try:
            experiment = await asyncio.to_thread(self._started_spec, store, experiment, status)
        except StoreMismatch as err:
            await self._fail(status, metrics, "ResultsMismatch", str(err))
            return
        replay, trace = experiment.spec.workload.trace, None
        if replay is not None:
            try:
                trace = await asyncio.to_thread(configmap_trace, self.core, namespace, replay)
            except TraceError as err:
                await self._fail(status, metrics, "InvalidTrace", str(err))
                return
        cluster = KubernetesCluster(self.client, ref)
        runner = ExperimentRunner(
            experiment, cluster, store, observer=FanOut([status, metrics]), trace=trace
        )
        task = asyncio.create_task(runner.run(on_cancel="detach"))
        stop = asyncio.create_task(stopped())
        self._running[uid] = status
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._running.pop(uid, None)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if stop.result():
                await cluster.teardown(experiment.spec.cleanup)
                self.metrics.forget(namespace, name)
            return
        stop.cancel()
        try:
            task.result()
        except (SpecNotRunnable, Forbidden) as err:
            await self._fail(status, metrics, err.reason, str(err))
        except StoreMismatch as err:
            await self._fail(status, metrics, "ResultsMismatch", str(err))

    def deleted(self, namespace: str, name: str) -> None:
        """The experiment is gone, and so are its metrics (its daemon forgets them once more
        when its runner has stopped, in case that reported after this)."""
        self.metrics.forget(namespace, name)

    @staticmethod
    async def _fail(
        status: ResourceStatus, metrics: ExperimentMetrics, reason: str, message: str
    ) -> None:
        await asyncio.to_thread(status.fail, reason, message)
        metrics.phase(ExperimentPhase.FAILED)

    def spec_changed(self, body: dict[str, Any]) -> None:
        """A spec changed after the experiment started (servers without CEL let it through):
        refused with a condition; the runner goes on with the spec it started with."""
        meta = body["metadata"]
        stored = body.get("status") or {}
        if stored.get("phase") in (None, ExperimentPhase.PENDING):
            return
        status = self._running.get(meta["uid"])
        if status is None:
            status = ResourceStatus(self.client, meta["namespace"], meta["name"], meta["uid"])
            status.conditions = [Condition.model_validate(c) for c in stored.get("conditions", [])]
        status.refuse_spec_change(meta.get("generation"), _IMMUTABLE)

    @staticmethod
    def _started_spec(
        store: ConfigMapStore, experiment: BenchmarkExperiment, status: ResourceStatus
    ) -> BenchmarkExperiment:
        """The spec the experiment started with; a later change is refused with a condition
        (on servers without CEL the API server cannot refuse it itself)."""
        started = store.stored_experiment()
        if started is None or started.spec == experiment.spec:
            return experiment
        status.refuse_spec_change(status.generation, _IMMUTABLE)
        return started
