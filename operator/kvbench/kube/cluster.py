"""The Kubernetes back end: vLLM pods on GPU nodes, routers and load-generator Jobs.

Workers are one StatefulSet per pool behind a headless Service, with one ClusterIP Service
over every pool's pods for `service` arms. A fresh start deletes every worker pod at once and
waits, through a watch, until each ordinal has a new pod UID and is Ready. The load generator
is a Job per run attempt that writes its result into ConfigMaps made for it, so the result is
on the cluster the moment the Job ends, whoever watches. Everything is found again by label
after an operator restart: nothing the runner relies on lives only in this process.
"""

import asyncio
import functools
import threading
import time
import weakref
from datetime import datetime
from typing import Any

import httpx
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from kvbench.api import Cleanup, EngineSpec, ExperimentSpec, RoutingArm
from kvbench.kube.capacity import Shortfall, gpu_count, gpu_shortfall
from kvbench.kube.manifests import (
    KV_EVENTS_PORT,
    LABEL_ATTEMPT,
    LABEL_RUN,
    ExperimentRef,
    load_job,
    load_objects,
    router_objects,
    worker_objects,
)
from kvbench.kube.objects import KubeObjects, selector_string, status_reason
from kvbench.kube.results import read_result_document, result_configmap_names, with_retries
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.counters import parse_metrics
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    Cluster,
    LoadState,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.caches import reset_prefix_caches
from kvbench.runner.failures import (
    ApiUnavailable,
    Forbidden,
    ImagePullFailed,
    LoadFailed,
    NoCapacity,
    RunTimeout,
    SpecNotRunnable,
    Unschedulable,
    WorkersNotReady,
)

__all__ = ["KubernetesCluster", "kube_problems"]

_WATCH_SLICE = 5
"""Seconds a watch runs before it is renewed: bounds how long a cancelled wait's thread
lives on."""
_API_PATIENCE = 60.0
"""Seconds a transient API error (5xx, 429, 409, no connection) is retried before it fails
the attempt."""
_BIND_WAIT = 60.0
"""Seconds the capacity lock waits for new worker pods to be placed."""
_STOP_WAIT = 20.0
"""Seconds a stopped load generator gets to write its partial result (its pod's deletion
grace period is 5 s)."""
_PULL_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}


_LOCKS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = (
    weakref.WeakKeyDictionary()
)


def _capacity_lock() -> asyncio.Lock:
    """One per event loop (the operator's): between one experiment's capacity check and its
    pods' placement no other experiment checks, so two never count the same free GPUs."""
    loop = asyncio.get_running_loop()
    if loop not in _LOCKS:
        _LOCKS[loop] = asyncio.Lock()
    return _LOCKS[loop]


def _exit_code(pod: Any) -> int | None:
    """The exit code of the pod's (first) container once it terminated."""
    for status in pod.status.container_statuses or []:
        if status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None


def kube_problems(spec: ExperimentSpec) -> list[str]:
    """What this back end cannot run yet, by field."""
    problems = []
    for i, arm in enumerate(spec.routing):
        if arm.dynamo is not None:
            problems.append(
                f"spec.routing[{i}] ({arm.name}).dynamo: Dynamo arms run locally only for now "
                "(kvbench run); on a cluster use an external arm in front of a Dynamo "
                "deployment"
            )
        if arm.router is not None and arm.router.implementation != "vllm-router":
            problems.append(
                f"spec.routing[{i}] ({arm.name}).router.implementation: only vllm-router is "
                "deployed by kvbench"
            )
    return problems


def _ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _why_not_ready(pod: Any | None) -> tuple[str, str]:
    """(failure kind, reason) of a pod that is not Ready."""
    if pod is None:
        return "missing", "no pod was created"
    status = pod.status
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return "unschedulable", f"not scheduled: {condition.reason}: {condition.message}"
    for container in status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason in _PULL_ERRORS:
            return "pull", f"{waiting.reason}: {waiting.message}"
        if waiting is not None and waiting.reason:
            last = container.last_state.terminated if container.last_state else None
            exit_text = f" (last exit {last.exit_code}: {last.reason})" if last else ""
            return "crash", f"{waiting.reason}{exit_text}, restarts {container.restart_count}"
        if container.state and container.state.running:
            return "starting", f"running for its start-up probe, restarts {container.restart_count}"
    return "pending", f"phase {status.phase}"


class KubernetesCluster(Cluster):
    """One experiment's children in one namespace, through `client` (the operator's)."""

    def __init__(self, client: kubernetes.client.ApiClient, experiment: ExperimentRef) -> None:
        self.client = client
        self.exp = experiment
        self.objects = KubeObjects(client)
        self.core = self.objects.core
        self._node_products: dict[str, str | None] = {}
        self._open_arm: ChildNames | None = None

    def problems(self, spec: ExperimentSpec) -> list[str]:
        return kube_problems(spec)

    def uses_simulator(self, spec: ExperimentSpec) -> bool:
        return spec.simulator.on_cluster

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A blocking API call in a thread. An API server that is restarting, overloaded or
        refusing writes for a while (5xx, 429, 409, no connection) is retried with back-off
        for `_API_PATIENCE` seconds (`with_retries`, the load generator's own policy), then
        becomes a typed failure: a passing outage must not cost a run its attempt. Every call
        kvbench makes is idempotent (apply, delete by UID, reads), so a repeat is safe."""
        name = getattr(fn, "__name__", str(fn))
        call = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.to_thread(with_retries, call, name, _API_PATIENCE)
        except ApiException as err:
            if err.status in (401, 403):
                raise Forbidden(f"API server refused {name}: {err.body}") from err
            if err.status >= 500 or err.status in (409, 429):
                raise ApiUnavailable(
                    f"API server answered {err.status}: {err.reason} ({name}, for "
                    f"{_API_PATIENCE:.0f} s)"
                ) from err
            raise
        except (ConnectionError, OSError, urllib3.exceptions.HTTPError) as err:
            raise ApiUnavailable(f"API server unreachable: {err}") from err

    async def recover(self, keep: ChildNames | None) -> None:
        def spare(kind: str, name: str) -> bool:
            return keep is not None and name.startswith(keep.prefix)

        await self._call(
            self.objects.delete_labelled,
            self.exp.namespace,
            self.exp.selector("router"),
            ("Deployment", "Service"),
            spare,
        )
        jobs = await self._call(
            self.objects.batch.list_namespaced_job,
            self.exp.namespace,
            label_selector=selector_string(self.exp.selector("loadgen")),
        )
        for job in jobs.items:  # finished ones stay for the teardown (cleanup.keepJobs)
            finished = any(
                c.type in ("Complete", "Failed") and c.status == "True"
                for c in job.status.conditions or []
            )
            if not finished and not spare("Job", job.metadata.name):
                await self._call(self.objects.delete, "Job", job.metadata.name, self.exp.namespace)
        if keep is None:
            await self._call(
                self.objects.delete_labelled,
                self.exp.namespace,
                self.exp.selector("worker"),
                ("StatefulSet",),
            )

    # workers

    def _pod_names(self, spec: ExperimentSpec) -> list[str]:
        return [
            f"{self.exp.statefulset(pool.name)}-{i}"
            for pool in spec.workers
            for i in range(pool.replicas)
        ]

    async def _worker_pods(self) -> dict[str, Any]:
        pods = await self._call(
            self.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(self.exp.selector("worker")),
        )
        return {p.metadata.name: p for p in pods.items}

    async def start_workers(
        self,
        spec: ExperimentSpec,
        variant: str,
        engine: EngineSpec,
        arm: RoutingArm,
        names: ChildNames,
    ) -> list[WorkerInfo]:
        if arm.external is not None:
            return await self._external_workers(arm)
        expected = self._pod_names(spec)
        async with _capacity_lock():
            shortfall = await self._call(self._gpu_shortfall, spec)
            if shortfall is not None and shortfall.never:
                raise SpecNotRunnable([f"spec.workers: {shortfall.message}"])
            if shortfall is not None:
                raise NoCapacity(shortfall.message)
            old = {name: pod.metadata.uid for name, pod in (await self._worker_pods()).items()}
            for manifest in worker_objects(self.exp, spec, variant, engine):
                await self._call(self.objects.apply, manifest)
            for name, uid in old.items():
                await self._call(self._delete_pod, name, uid)
            await self._wait_bound(expected, set(old.values()), spec.timeouts.workers_ready_seconds)
        pods = await self._watch_ready(
            expected, set(old.values()), spec.timeouts.workers_ready_seconds
        )
        return [await self._worker_info(pods[name], engine) for name in expected]

    def _gpu_shortfall(self, spec: ExperimentSpec) -> Shortfall | None:
        if not any(gpu_count(pool) for pool in spec.workers):
            return None
        nodes = self.core.list_node().items
        try:
            pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items
        except ApiException as err:
            if err.status != 403:
                raise
            # Watching a namespace list, the operator reads pods there only: GPUs taken in
            # other namespaces show as Unschedulable workers (docs/operator.md).
            pods = self.core.list_namespaced_pod(
                self.exp.namespace, field_selector="spec.nodeName!="
            ).items
        return gpu_shortfall(spec, nodes, pods, self.exp.uid)

    async def _wait_bound(self, expected: list[str], old_uids: set[str], timeout: float) -> None:
        """Until the scheduler has placed every new worker pod (then a next experiment's
        capacity check counts their GPUs); no longer than `timeout` (the readiness wait then
        says why a pod is not placed)."""
        deadline = time.monotonic() + min(timeout, _BIND_WAIT)
        while time.monotonic() < deadline:
            pods = await self._worker_pods()
            if all(
                (pod := pods.get(name)) is not None
                and pod.metadata.uid not in old_uids
                and pod.spec.node_name
                for name in expected
            ):
                return
            await asyncio.sleep(0.5)

    def _delete_pod(self, name: str, uid: str) -> None:
        """Delete that very pod (by UID: never its replacement, which the StatefulSet may
        already have made)."""
        body = kubernetes.client.V1DeleteOptions(
            grace_period_seconds=5, preconditions=kubernetes.client.V1Preconditions(uid=uid)
        )
        try:
            self.core.delete_namespaced_pod(name, self.exp.namespace, body=body)
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    async def _watch_ready(
        self, expected: list[str], old_uids: set[str], timeout: float
    ) -> dict[str, Any]:
        """The pods named `expected`, once each is a new start (a UID not in `old_uids`) and
        Ready; typed failures with every pod's reason after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        selector = selector_string(self.exp.selector("worker"))
        current: dict[str, Any] = {}

        def fresh_ready() -> bool:
            return all(
                (p := current.get(name)) is not None
                and p.metadata.uid not in old_uids
                and _ready(p)
                for name in expected
            )

        stop = threading.Event()

        def watch() -> None:
            listed = self.core.list_namespaced_pod(self.exp.namespace, label_selector=selector)
            current.update({p.metadata.name: p for p in listed.items})
            version = listed.metadata.resource_version
            while not fresh_ready() and not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                stream = kubernetes.watch.Watch().stream(
                    self.core.list_namespaced_pod,
                    self.exp.namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=max(1, int(min(remaining, _WATCH_SLICE))),
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
            await self._call(watch)
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
            elif pod is not None and _ready(pod):
                continue
            else:
                kind, why = _why_not_ready(pod)
            if kind in ("crash", "starting"):
                why += "\n" + await self._log_tail(name, 10, previous=kind == "crash")
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

    async def _log_tail(self, pod: str, lines: int, previous: bool = False) -> str:
        try:
            return await self._call(
                self.core.read_namespaced_pod_log,
                pod,
                self.exp.namespace,
                tail_lines=lines,
                previous=previous,
            )
        except Exception as err:
            return f"(no log: {err})"

    async def _gpu_product(self, node: str | None) -> str | None:
        if node is None:
            return None
        if node not in self._node_products:
            found = await self._call(self.core.read_node, node)
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
        log = await self._call(
            self.core.read_namespaced_pod_log, pod.metadata.name, self.exp.namespace
        )
        for line in log.splitlines():
            if "GPU KV cache size:" in line:
                digits = line.split("GPU KV cache size:")[1].split("tokens")[0]
                return int(digits.replace(",", "").strip())
        return None

    async def _worker_info(self, pod: Any, engine: EngineSpec) -> WorkerInfo:
        status = pod.status
        ready_at = next(c.last_transition_time for c in status.conditions if c.type == "Ready")
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
        )

    async def _external_workers(self, arm: RoutingArm) -> list[WorkerInfo]:
        assert arm.external is not None
        pods = await self._call(
            self.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=selector_string(arm.external.pod_selector),
        )
        port = arm.external.metrics_port
        workers = []
        for pod in pods.items:
            if not _ready(pod):
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
                )
            )
        if not workers:
            raise WorkersNotReady({"external": f"no Ready pod matches {arm.external.pod_selector}"})
        return workers

    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        await reset_prefix_caches(workers)

    # arms

    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        await self.close_arm()
        port = spec.engine.port
        if arm.service is not None:
            await self._wait_endpoints(self.exp.service, {w.base_url for w in workers}, port)
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
            await self._call(self.objects.apply, manifest)
        self._open_arm = names
        await self._wait_router(names, spec.timeouts.workers_ready_seconds)
        url = f"http://{names.arm}.{self.exp.namespace}.svc.cluster.local:8000"
        return UrlEndpoint(arm=arm.name, url=url)

    async def _wait_endpoints(self, service: str, urls: set[str], port: int) -> None:
        """Until the Service's ready endpoints are exactly these workers (the Service is
        the system under test: a load sent before it knows every pod would skew the first
        requests)."""
        wanted = {u.split("//")[1].split(":")[0] for u in urls}
        deadline = time.monotonic() + 60
        while True:
            ready = await self._call(
                self.objects.endpoint_slice_addresses, self.exp.namespace, service
            )
            if ready == wanted:
                return
            if time.monotonic() > deadline:
                raise WorkersNotReady(
                    {service: f"Service endpoints {sorted(ready)} never became {sorted(wanted)}"}
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
            pods = await self._call(
                self.core.list_namespaced_pod, self.exp.namespace, label_selector=selector
            )
            ready = [p for p in pods.items if _ready(p)]
            if ready:
                await self._wait_endpoints(
                    names.arm, {f"http://{ready[0].status.pod_ip}:8000"}, 8000
                )
                return
            if time.monotonic() > deadline:
                reasons = {p.metadata.name: _why_not_ready(p)[1] for p in pods.items}
                raise WorkersNotReady(reasons or {names.arm: "no router pod"})
            await asyncio.sleep(0.2)

    async def close_arm(self) -> None:
        if self._open_arm is None:
            return
        names, self._open_arm = self._open_arm, None
        for kind in ("Deployment", "Service"):
            await self._call(self.objects.delete, kind, names.arm, self.exp.namespace)

    # load

    async def start_load(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        results = result_configmap_names(names.prefix)
        for manifest in load_objects(self.exp, names, config, results):
            if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] in results:
                await self._call(self._create_if_absent, manifest)
            else:
                await self._call(self.objects.apply, manifest)
        await self._call(self.objects.apply, load_job(self.exp, spec, names, results))

    def _create_if_absent(self, manifest: dict) -> None:
        """A result ConfigMap is created once: never overwrite what a Job already wrote."""
        try:
            self.core.create_namespaced_config_map(self.exp.namespace, manifest)
        except ApiException as err:
            if err.status != 409 or status_reason(err) != "AlreadyExists":
                raise  # a refusal (409 Conflict, 5xx) is retried by _call

    async def _job(self, names: ChildNames) -> Any | None:
        try:
            return await self._call(
                self.objects.batch.read_namespaced_job, names.load, self.exp.namespace
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    async def _document(self, names: ChildNames) -> bytes | None:
        return await self._call(
            read_result_document,
            self.core,
            self.exp.namespace,
            result_configmap_names(names.prefix),
        )

    async def load_state(self, names: ChildNames) -> LoadState:
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

    async def wait_load(self, names: ChildNames, timeout: float) -> bytes:
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
                self.objects.batch.list_namespaced_job,
                self.exp.namespace,
                label_selector=selector,
                timeout_seconds=max(1, int(min(remaining, _WATCH_SLICE))),
            )
            for event in stream:
                job = event["object"]
                if event["type"] == "DELETED" or any(
                    c.type in ("Complete", "Failed") and c.status == "True"
                    for c in job.status.conditions or []
                ):
                    return

        while True:
            state = await self.load_state(names)
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
                raise LoadFailed(reason + "\n" + await self._load_log(names))
            if state.phase == "absent":
                raise LoadFailed(f"Job {names.load} is gone and left no result")
            if time.monotonic() >= deadline:
                document = await self._stop_load(names)
                if document is not None:
                    return document
                await self.release_load(names, keep=False)
                raise RunTimeout(f"Job {names.load} still running after {timeout:.0f} s: deleted")
            await self._call(watch_job)

    async def _stop_load(self, names: ChildNames) -> bytes | None:
        """Stop the attempt's load generator as its Job's deadline does (its pod deleted with
        its grace period: SIGTERM) and wait for the partial result it then writes."""
        pods = await self._call(
            self.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=f"job-name={names.load}",
        )
        for pod in pods.items:
            await self._call(self._delete_pod, pod.metadata.name, pod.metadata.uid)
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
            pods = await self._call(
                self.core.list_namespaced_pod,
                self.exp.namespace,
                label_selector=f"job-name={names.load}",
            )
            stopping = any(
                pod.metadata.deletion_timestamp is not None or _exit_code(pod) == 143
                for pod in pods.items
            )
            if not stopping or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(1.0)

    async def _load_log(self, names: ChildNames) -> str:
        pods = await self._call(
            self.core.list_namespaced_pod,
            self.exp.namespace,
            label_selector=f"job-name={names.load}",
        )
        if not pods.items:
            return "(no load generator pod left)"
        return await self._log_tail(pods.items[0].metadata.name, 20)

    async def release_load(self, names: ChildNames, keep: bool) -> None:
        namespace = self.exp.namespace
        if not keep:
            await self._call(self.objects.delete, "Job", names.load, namespace)
        for kind, suffix in (
            ("ConfigMap", "config"),
            ("RoleBinding", "loadgen"),
            ("Role", "loadgen"),
        ):
            await self._call(self.objects.delete, kind, f"{names.prefix}-{suffix}", namespace)

    # checks and logs

    async def check_workers(self, workers: list[WorkerInfo]) -> list[str]:
        if not workers:
            return []
        pods = await self._call(
            self.core.list_namespaced_pod, self.exp.namespace, label_selector=None
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
            elif not _ready(pod):
                problems.append(f"{worker.name}: not Ready")
        return problems

    async def worker_logs(self, worker: WorkerInfo) -> str:
        return await self._call(
            self.core.read_namespaced_pod_log, worker.name, self.exp.namespace, tail_lines=200
        )

    async def detach(self) -> None:
        self._open_arm = None

    async def teardown(self, cleanup: Cleanup) -> None:
        namespace = self.exp.namespace
        delete = self.objects.delete_labelled
        await self._call(delete, namespace, self.exp.selector("router"), ("Deployment", "Service"))
        kinds = ("ConfigMap", "RoleBinding", "Role", "ServiceAccount")
        if not cleanup.keep_jobs:
            kinds = ("Job", *kinds)
        await self._call(delete, namespace, self.exp.selector("loadgen"), kinds)
        if not cleanup.keep_workers:
            await self._call(delete, namespace, self.exp.selector("worker"), ("StatefulSet",))
            for component in ("workers", "service"):
                await self._call(delete, namespace, self.exp.selector(component), ("Service",))
