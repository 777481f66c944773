"""A worker out of the Service for part of a window disturbs the run: the window's watch of the
EndpointSlices sees it leave or turn not ready (and back), and the pods' Ready transitions
show it afterwards, even to an operator that was not watching. No API server: fake slices and
pods."""

import asyncio
import queue
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes
import pytest
import yaml

from kvbench.api import ServiceBalancing, parse_experiment
from kvbench.kube.cluster import KubernetesCluster
from kvbench.kube.cluster import cluster as cluster_module
from kvbench.kube.cluster.endpoints import EndpointLapses, EndpointWatch
from kvbench.kube.cluster.workers import WorkerPods
from kvbench.kube.manifests import ExperimentRef
from kvbench.loadgen.config import RunConfig, UrlTarget
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames, UrlEndpoint, WorkerInfo

ROOT = Path(__file__).resolve().parents[3]
REF = ExperimentRef(name="exp", namespace="ns", uid="exp-uid", image="img")
AT = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _worker(i: int, ready_at: datetime | None = AT) -> WorkerInfo:
    base = f"http://10.0.0.{i}:8000"
    return WorkerInfo(
        name=f"w-{i}", pool="gpu", uid=f"uid-{i}", base_url=base, metrics_url=f"{base}/metrics",
        ready_at=ready_at,
    )  # fmt: skip


WORKERS = [_worker(1), _worker(2)]


def _slice(name: str, ready: dict[int, bool], version: str = "1") -> dict[str, Any]:
    """An EndpointSlice with worker i's endpoint, ready or not, for each entry of `ready`."""
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "endpoints": [
            {
                "addresses": [f"10.0.0.{i}"],
                "conditions": {"ready": ok},
                "targetRef": {"kind": "Pod", "name": f"w-{i}", "uid": f"uid-{i}"},
            }
            for i, ok in ready.items()
        ],
    }


# the tracker


def test_endpoints_ready_throughout_disturb_nothing() -> None:
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True, 2: True})], AT)
    seen.event("MODIFIED", _slice("s", {1: True, 2: True}), AT)
    seen.event("ADDED", _slice("other", {3: True}), AT)
    assert seen.problems(WORKERS) == {}


def test_an_endpoint_not_ready_for_a_moment_disturbs_its_worker_even_once_back() -> None:
    """The bug: a readiness probe took a saturated worker out of the Service mid-window and it
    was back by the end, so the end-of-window check found nothing."""
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True, 2: True})], AT)
    seen.event("MODIFIED", _slice("s", {1: True, 2: False}), AT + timedelta(seconds=7))
    seen.event("MODIFIED", _slice("s", {1: True, 2: True}), AT + timedelta(seconds=9))
    assert seen.problems(WORKERS) == {
        "w-2": "was not ready in the Service's endpoints at 12:00:07 UTC (kube-proxy sent it "
        "no new connection meanwhile)"
    }


def test_an_endpoint_that_left_the_slices_disturbs_its_worker() -> None:
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True}), _slice("t", {2: True})], AT)
    seen.event("DELETED", _slice("t", {2: True}), AT + timedelta(seconds=3))
    seen.event("ADDED", _slice("t", {2: True}), AT + timedelta(seconds=4))
    assert list(seen.problems(WORKERS)) == ["w-2"]
    assert seen.problems(WORKERS)["w-2"].startswith("left the Service's endpoints at 12:00:03")


def test_a_worker_not_ready_in_the_service_when_the_load_started_is_reported() -> None:
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True, 2: False})], AT)
    assert seen.problems(WORKERS) == {
        "w-2": "not among the Service's ready endpoints when the load started"
    }


def test_a_relisting_after_an_expired_watch_finds_what_changed_meanwhile() -> None:
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True, 2: True})], AT)
    seen.listed([_slice("s", {1: True})], AT + timedelta(seconds=5))
    assert list(seen.problems(WORKERS)) == ["w-2"]


def test_another_pod_leaving_disturbs_no_worker() -> None:
    seen = EndpointLapses()
    seen.listed([_slice("s", {1: True, 2: True, 3: True})], AT)
    seen.event("MODIFIED", _slice("s", {1: True, 2: True, 3: False}), AT)
    assert seen.problems(WORKERS) == {}


# the watch thread


class FakeSlices:
    """EndpointSlices whose watch yields what a test puts in `events`; `join()` returns once
    the watch has taken in every event put."""

    selector = "kubernetes.io/service-name=svc"

    def __init__(self, slices: list[dict[str, Any]]) -> None:
        self.slices = slices
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lists = 0

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return self.slices, "1"

    def watch(self, since: str, seconds: int) -> Iterator[dict[str, Any]]:
        while True:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                return  # this watch slice ends
            try:
                yield event
            finally:
                self.events.task_done()


def test_the_watch_thread_sees_a_flip_in_the_window() -> None:
    slices = FakeSlices([_slice("s", {1: True, 2: True})])
    watch = EndpointWatch(slices)  # type: ignore[arg-type]
    watch.start()
    slices.events.put({"type": "MODIFIED", "object": _slice("s", {1: False, 2: True}, "2")})
    slices.events.put({"type": "MODIFIED", "object": _slice("s", {1: True, 2: True}, "3")})
    slices.events.join()
    watch.stop()
    assert list(watch.problems(WORKERS)) == ["w-1"]


def test_an_expired_watch_lists_again() -> None:
    slices = FakeSlices([_slice("s", {1: True, 2: True})])
    watch = EndpointWatch(slices)  # type: ignore[arg-type]
    watch.start()
    slices.slices = [_slice("s", {1: True})]
    slices.events.put({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})
    slices.events.put({"type": "MODIFIED", "object": _slice("s", {1: True, 2: True}, "9")})
    slices.events.join()
    watch.stop()
    assert slices.lists == 2
    assert list(watch.problems(WORKERS)) == ["w-2"]


# the pods' Ready transitions, and the check's one line per worker


def _pod(i: int, ready_since: datetime, ready: bool = True, restarts: int = 0) -> Any:
    client = kubernetes.client
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"w-{i}", uid=f"uid-{i}"),
        status=client.V1PodStatus(
            conditions=[
                client.V1PodCondition(
                    type="Ready", status=str(ready), last_transition_time=ready_since
                )
            ],
            container_statuses=[
                client.V1ContainerStatus(
                    name="engine", image="img", image_id="", ready=ready, restart_count=restarts
                )
            ],
        ),
    )


class FakeApi:
    """What `WorkerPods.check` calls: one pod listing."""

    def __init__(self, pods: list[Any]) -> None:
        self.core = SimpleNamespace(list_namespaced_pod=lambda *a, **k: SimpleNamespace(items=pods))

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def _check(pods: list[Any], workers: list[WorkerInfo], lapses=None) -> list[str]:
    return asyncio.run(WorkerPods(FakeApi(pods), REF).check(workers, lapses))  # type: ignore[arg-type]


def test_a_worker_ready_again_since_a_later_time_flipped_though_no_one_watched() -> None:
    """The bug a restarted operator hides: the watch is gone, the pod is Ready again by the
    check, only its Ready condition's transition time tells."""
    later = AT + timedelta(seconds=12)
    problems = _check([_pod(1, AT), _pod(2, later)], WORKERS)
    assert problems == [
        "w-2: was not Ready for a while (Ready at 12:00:00, again since 12:00:12 UTC)"
    ]


def test_workers_ready_since_they_were_started_check_clean() -> None:
    assert _check([_pod(1, AT), _pod(2, AT)], WORKERS) == []
    assert _check([_pod(1, AT), _pod(2, AT)], [_worker(1, None), _worker(2, None)]) == []


def test_one_line_per_worker_the_pods_own_problem_first() -> None:
    lapses = {"w-1": "left the Service's endpoints at 12:00:03 UTC", "w-2": "gone too"}
    later = AT + timedelta(seconds=12)
    problems = _check([_pod(1, later), _pod(2, AT, restarts=1)], WORKERS, lapses)
    assert problems == [
        "w-1: left the Service's endpoints at 12:00:03 UTC",
        "w-2: restarted 1x",
    ]


# the back end's wiring: a Service arm's window is watched, its balancing recorded


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["routing"].append({"name": "affinity", "prefixAffinity": {}})
    experiment = parse_experiment(document)
    slices = FakeSlices([_slice("s", {1: True, 2: True})])
    balancing = ServiceBalancing(mode="ipvs", scheduler="rr", source="test")

    async def read_balancing(api: Any) -> ServiceBalancing:
        return balancing

    monkeypatch.setattr(cluster_module, "EndpointSlices", lambda *args: slices)
    monkeypatch.setattr(cluster_module, "read_balancing", read_balancing)
    cluster = KubernetesCluster(kubernetes.client.ApiClient(), REF)

    async def open_arm(spec, arm, workers, names) -> UrlEndpoint:
        return UrlEndpoint(arm=arm.name, url="http://svc:8000")

    async def nothing(*args: Any) -> None:
        return None

    cluster.arms.open = open_arm  # type: ignore[method-assign]
    cluster.load.start = nothing  # type: ignore[method-assign]
    cluster.workers.api = FakeApi([_pod(1, AT), _pod(2, AT)])  # type: ignore[assignment]
    return cluster, experiment, slices


def _load(cluster: KubernetesCluster, experiment, arm_name: str):
    spec = experiment.spec
    arm = next(a for a in spec.routing if a.name == arm_name)
    run = plan_experiment(experiment).runs[0]
    names = ChildNames(experiment="exp", index=0, attempt=1)
    config = RunConfig(
        model=spec.engine.model, target=UrlTarget(url="http://svc:8000"),
        workload=spec.workload, point=run.point, seed=run.seed,
    )  # fmt: skip

    async def opened() -> UrlEndpoint:
        endpoint = await cluster.open_arm(spec, arm, WORKERS, names)
        await cluster.start_load(spec, config, names)
        return endpoint  # type: ignore[return-value]

    return opened


def test_a_service_arms_window_is_watched_and_its_balancing_recorded(wired) -> None:
    cluster, experiment, slices = wired

    async def scenario() -> tuple[UrlEndpoint, list[str]]:
        endpoint = await _load(cluster, experiment, "service")()
        slices.events.put({"type": "MODIFIED", "object": _slice("s", {1: True, 2: False}, "2")})
        slices.events.put({"type": "MODIFIED", "object": _slice("s", {1: True, 2: True}, "3")})
        slices.events.join()
        return endpoint, await cluster.check_workers(WORKERS)

    endpoint, problems = asyncio.run(scenario())
    assert endpoint.balancing is not None and endpoint.balancing.mode == "ipvs"
    assert len(problems) == 1 and problems[0].startswith("w-2: was not ready in the Service's")
    assert cluster.endpoints is None, "the check ends the window's watch"


def test_other_arms_are_not_watched_nor_given_a_balancing(wired) -> None:
    cluster, experiment, slices = wired

    async def scenario() -> UrlEndpoint:
        endpoint = await _load(cluster, experiment, "affinity")()
        assert await cluster.check_workers(WORKERS) == []
        return endpoint

    assert asyncio.run(scenario()).balancing is None
    assert slices.lists == 0
