"""The back ends under the `Cluster` contract: what the runner relies on, run against each.

A back end enters the suite as a `Backend`: how to make a cluster, how to disturb a worker
and a load generator from outside (as a node, a user or a crash would), and how to see what
it left behind. The Kubernetes back end joins with the operator.
"""

import asyncio
import os
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path

import kubernetes
import yaml

from kvbench.api import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    BenchmarkExperiment,
    parse_experiment,
)
from kvbench.kube.cluster import KubernetesCluster
from kvbench.kube.manifests import LABEL_UID, ExperimentRef
from kvbench.kube.results import CLAIM, result_configmap_names
from kvbench.runner.cluster import ChildNames, Cluster, WorkerInfo
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import CPU_NODE_SHARE
from kvbench.testing.node.processes import kill_pod_containers

ROOT = Path(__file__).resolve().parents[2]
GPU = {"nvidia.com/gpu.present": "true"}


class Backend(ABC):
    """One back end under the contract."""

    @abstractmethod
    def cluster(self) -> Cluster:
        """A cluster; a second call is a restarted runner's view of the same place."""

    @abstractmethod
    async def kill_worker(self, worker: WorkerInfo) -> None:
        """End a worker from outside, as a crash or a node does."""

    @abstractmethod
    async def kill_load(self, names: ChildNames) -> None:
        """End an attempt's load generator from outside without a result."""

    @abstractmethod
    def leftovers(self) -> list[str]:
        """What still runs that the back end started."""

    @abstractmethod
    def worker_names(self, experiment: BenchmarkExperiment) -> list[str]:
        """The names the back end gives the experiment's workers."""

    def failed_creations(self) -> list[str]:
        """What the platform failed to create for the back end (Kubernetes: FailedCreate
        events of its controllers); none where the back end creates everything itself."""
        return []


class LocalBackend(Backend):
    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self._clusters: list[LocalCluster] = []

    def cluster(self) -> LocalCluster:
        cluster = LocalCluster(self.work_dir)
        self._clusters.append(cluster)
        return cluster

    async def kill_worker(self, worker: WorkerInfo) -> None:
        children = self._clusters[-1].children
        child = children.get(worker.name)
        assert child is not None
        await children.stop(child, grace=0)

    async def kill_load(self, names: ChildNames) -> None:
        children = self._clusters[-1].children
        child = children.get(names.load)
        assert child is not None
        os.killpg(child.pid, signal.SIGKILL)

    def leftovers(self) -> list[str]:
        cluster = LocalCluster(self.work_dir)
        return [c.name for c in cluster.children.all() if cluster.children.alive(c)]

    def worker_names(self, experiment: BenchmarkExperiment) -> list[str]:
        return [f"{p.name}-{i}" for p in experiment.spec.workers for i in range(p.replicas)]


def _describe(pod) -> str:
    """`pod/NAME`, and where it is in its end: a pod that outlives its deletion says why."""
    containers = []
    for c in pod.status.container_statuses or []:
        if c.state is None:
            continue
        kind, state = next((k, v) for k, v in c.state.to_dict().items() if v)
        why = f" ({state['reason']})" if state.get("reason") else ""
        containers.append(f"{c.name} {kind}{why}, restarts {c.restart_count}")
    deleting = pod.metadata.deletion_timestamp
    return (
        f"pod/{pod.metadata.name} ({pod.status.phase} on {pod.spec.node_name}"
        f"{f', deleted at {deleting:%H:%M:%S}' if deleting else ''}"
        f"{', ' + ', '.join(containers) if containers else ''})"
    )


class KubeBackend(Backend):
    """The Kubernetes back end on the test cluster, owned by a real experiment resource (no
    operator runs: the test drives the back end as the runner would)."""

    def __init__(self, test_cluster: TestCluster, namespace: str) -> None:
        self.client = test_cluster.api_client()
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.namespace = namespace
        experiment = small_experiment()
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": experiment.metadata.name},
            "spec": experiment.spec.to_k8s(),
        }
        created = kubernetes.client.CustomObjectsApi(self.client).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body
        )
        self.ref = ExperimentRef(
            name=experiment.metadata.name,
            namespace=namespace,
            uid=created["metadata"]["uid"],
            image="ghcr.io/kvbench/kvbench:0.1.0",  # an image the test nodes hold
        )

    def cluster(self) -> KubernetesCluster:
        return KubernetesCluster(self.client, self.ref)

    async def kill_worker(self, worker: WorkerInfo) -> None:
        await asyncio.to_thread(
            self.core.delete_namespaced_pod, worker.name, self.namespace, grace_period_seconds=0
        )

    async def kill_load(self, names: ChildNames) -> None:
        """SIGKILL the Job's running container once it has claimed the attempt (it is
        sending), as an OOM kill would: it writes nothing (a deleted pod would get SIGTERM
        and write a partial result); the Job's next pod must refuse to measure again on loaded
        workers."""

        def kill() -> None:
            deadline = time.monotonic() + 60
            while True:
                pods = self.core.list_namespaced_pod(
                    self.namespace, label_selector=f"job-name={names.load}"
                ).items
                running = [p for p in pods if p.status.phase == "Running"]
                first = self.core.read_namespaced_config_map(
                    result_configmap_names(names.prefix)[0], self.namespace
                )
                if running and CLAIM in (first.metadata.annotations or {}):
                    pod = running[0].metadata
                    if kill_pod_containers(pod.uid, pod.name):
                        return
                assert time.monotonic() < deadline, "the load generator's pod never ran"
                time.sleep(0.1)

        await asyncio.to_thread(kill)

    def wait_measuring(self, names: ChildNames, timeout: float = 120) -> None:
        """Until the load generator's pod logs its warm-up done: its measured window has
        begun (a Job just made has not even started its pod; a fault then lands before it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"job-name={names.load}"
            ).items
            for pod in pods:
                if pod.status.phase != "Running":
                    continue
                log = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace)
                if "warmup: " in log and " requests done" in log.split("warmup: ", 1)[1]:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"{names.load} never began its measured window")

    def leftovers(self) -> list[str]:
        """Pods, StatefulSets, Deployments and Jobs of the experiment still there after their
        deletion had a minute to finish; pods whose deletion the API server holds (their
        deletion timestamp set) three. Kubernetes 1.20's kubelet, which the test nodes run,
        can take several times a pod's grace period to report it gone (kubernetes#97288, a
        1.20 regression): such a pod is then the node's to finish, not the back end's."""
        selector = f"{LABEL_UID}={self.ref.uid}"
        apps = kubernetes.client.AppsV1Api(self.client)
        batch = kubernetes.client.BatchV1Api(self.client)
        start = time.monotonic()
        while True:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
            found = [
                *(_describe(p) for p in pods),
                *(f"statefulset/{s.metadata.name}" for s in apps.list_namespaced_stateful_set(
                    self.namespace, label_selector=selector).items),
                *(f"deployment/{d.metadata.name}" for d in apps.list_namespaced_deployment(
                    self.namespace, label_selector=selector).items),
                *(f"job/{j.metadata.name}" for j in batch.list_namespaced_job(
                    self.namespace, label_selector=selector).items),
            ]  # fmt: skip
            deleting = len(found) == len(pods) and all(p.metadata.deletion_timestamp for p in pods)
            if not found or time.monotonic() - start > (180 if deleting else 60):
                return found
            time.sleep(0.5)

    def failed_creations(self) -> list[str]:
        """FailedCreate events, less the API server's "please try again" (a 504 server
        timeout on a busy machine): the controller retries those, and they say the control
        plane was slow, not that what the back end asked for was refused."""
        events = self.core.list_namespaced_event(self.namespace).items
        return [
            f"{e.involved_object.name}: {e.message}"
            for e in events
            if e.reason == "FailedCreate" and not (e.message or "").endswith("please try again.")
        ]

    def worker_names(self, experiment: BenchmarkExperiment) -> list[str]:
        return [
            f"{self.ref.statefulset(p.name)}-{i}"
            for p in experiment.spec.workers
            for i in range(p.replicas)
        ]


def small_experiment(**spec_changes) -> BenchmarkExperiment:
    """Two simulated workers, one prefix point: a run of a few seconds."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    # On the GPU nodes, as a real pool would be: a simulated worker asks for no GPU, and one
    # scheduled on the CPU node would take the CPU the load generator needs there.
    spec["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU,
                        "simulation": {"profile": "qwen3-0.6b-24gb"}}]  # fmt: skip
    spec["routing"] = [{"name": "service", "service": {}}]
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["load"].update(concurrency=[4], trials=1)
    # Off GPU nodes (the default), asking for what a test node holds (each is this machine).
    spec["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    for key, value in spec_changes.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    document["metadata"]["name"] = "contract"
    return parse_experiment(document)
