"""The results store in ConfigMaps, on a real API server (1.20) and owned by a real
BenchmarkExperiment: a new store instance reads back what another saved, 1,000 records of 16
pods fit, another experiment of the same name (another UID) or a changed spec is refused, and
deleting the experiment has the garbage collector delete every ConfigMap of it."""

from __future__ import annotations

import base64
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from kvbench.api import (
    BenchmarkExperiment,
    PodResult,
    RunRecord,
    RunSummary,
    parse_experiment,
)
from kvbench.api.crd import crd_yaml
from kvbench.kube.manifests import LABEL_UID, ExperimentRef, load_objects
from kvbench.kube.results import CONFIGMAP_BUDGET, result_configmap_names, write_result
from kvbench.kube.store import ConfigMapFull, ConfigMapStore
from kvbench.loadgen.config import RunConfig
from kvbench.plan import plan_experiment
from kvbench.plan.planner import PlannedRun
from kvbench.runner import RunStage, RunState, StoreMismatch, aggregate
from kvbench.runner.cluster.base import ChildNames, PodsEndpoint, WorkerInfo
from kvbench.runner.stores.directory import resolved_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
NAME = EXAMPLE["metadata"]["name"]
NOW = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def crd(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`kvbench crd` applied (kubectl 1.20 knows no CEL rules, hence --validate=false)."""
    path = tmp_path_factory.mktemp("crd") / "crd.yaml"
    path.write_text(crd_yaml())
    applied = cluster.kubectl("apply", "--validate=false", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    name = "crd/benchmarkexperiments.kvbench.io"
    ready = cluster.kubectl("wait", "--for=condition=established", name, "--timeout=60s")
    assert ready.returncode == 0, ready.stderr


def _thousand_runs_on_16_pods() -> BenchmarkExperiment:
    """The example, grown to 4 pools of 4 workers, 5 arms, 20 prefix counts, 2 x 5 trials."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    spec["workers"] = [{"name": f"pool{i}", "replicas": 4} for i in range(4)]
    spec["routing"] = [{"name": f"arm{i}", "service": {}} for i in range(5)]
    spec["workload"]["sharedPrefix"]["prefixes"] = list(range(1, 21))
    spec["load"].update(concurrency=[4, 8], trials=5)
    return parse_experiment(document)


@pytest.fixture
def experiment(request: pytest.FixtureRequest) -> BenchmarkExperiment:
    if getattr(request, "param", None) == "thousand":
        return _thousand_runs_on_16_pods()
    return parse_experiment(EXAMPLE)


@pytest.fixture
def owner(
    crd: None, cluster: TestCluster, namespace: str, experiment: BenchmarkExperiment
) -> dict[str, Any]:
    """The ownerReference of a real BenchmarkExperiment resource of `experiment`."""
    objects = kubernetes.client.CustomObjectsApi(cluster.api_client())
    body = {**EXAMPLE, "spec": experiment.spec.to_k8s()}
    created = objects.create_namespaced_custom_object(
        "kvbench.io", "v1alpha1", namespace, "benchmarkexperiments", body
    )
    return {
        "apiVersion": "kvbench.io/v1alpha1",
        "kind": "BenchmarkExperiment",
        "name": NAME,
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _store(core: kubernetes.client.CoreV1Api, namespace: str, owner: dict[str, Any]):
    return ConfigMapStore(core, namespace, NAME, owner["uid"], owner)


def _workers() -> list[WorkerInfo]:
    """16 pods, as a run of the thousand-run experiment has."""
    return [
        WorkerInfo(
            name=f"{NAME}-pool{p // 4}-{p % 4}", pool=f"pool{p // 4}", uid=str(uuid.uuid4()),
            node=f"gpu-node-{p}", image="vllm/vllm-openai:v0.31.0", gpu_product="NVIDIA-H200",
            gpu_index="0", base_url=f"http://10.0.{p}.17:8000",
            metrics_url=f"http://10.0.{p}.17:8000/metrics", kv_cache_tokens=22048,
            startup_seconds=41.25,
        )
        for p in range(16)
    ]  # fmt: skip


def _state(run: PlannedRun, stage: RunStage) -> RunState:
    workers = _workers()
    return RunState(
        index=run.index, id=run.id, stage=stage,
        names=ChildNames(experiment=NAME, index=run.index, attempt=1), workers=workers,
        endpoint=PodsEndpoint(arm=run.arm, pods={w.name: w.base_url for w in workers}),
        load_started_at=NOW, raw=f"configmaps:{NAME}-r{run.index}-a1-result",
    )  # fmt: skip


def _record(run: PlannedRun) -> RunRecord:
    return RunRecord(
        id=run.id, index=run.index, arm=run.arm, variant=run.variant, point=run.point,
        trial=run.trial, seed=run.seed, digest="sha256:" + "0" * 64, started_at=NOW,
        finished_at=NOW,
        pods=[
            PodResult(
                pod=w.name, uid=w.uid, node=w.node, address=w.base_url, image=w.image,
                gpu_product=w.gpu_product, gpu_index="0", kv_cache_tokens=22048,
                startup_seconds=41.25, prefix_cache_queries=123456.0, prefix_cache_hits=98765.0,
                requests=33.0, prompt_tokens=123456.0, generation_tokens=4321.0,
            )
            for w in _workers()
        ],
        summary=RunSummary(requests=480, request_hit_rate=0.55, token_hit_rate=0.52,
                           ttft_p50=0.05, ttft_p99=0.4),
        raw_results=f"configmaps:{NAME}-r{run.index}-a1-result",
    )  # fmt: skip


def _configmaps(core: kubernetes.client.CoreV1Api, namespace: str, uid: str):
    return core.list_namespaced_config_map(namespace, label_selector=f"{LABEL_UID}={uid}").items


def _stored_bytes(configmap: kubernetes.client.V1ConfigMap) -> int:
    """What the API server counts against a ConfigMap's 1 MiB: keys and (decoded) values."""
    data = sum(len(k) + len(v.encode()) for k, v in (configmap.data or {}).items())
    binary = configmap.binary_data or {}
    return data + sum(len(k) + len(v) * 3 // 4 for k, v in binary.items())


@pytest.mark.parametrize("experiment", ["thousand"], indirect=True)
def test_a_new_instance_reads_back_states_records_and_aggregate(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    runs = plan_experiment(experiment).runs
    store = _store(core, namespace, owner)
    store.open(experiment)
    store.save_state(_state(runs[0], RunStage.PENDING))
    store.save_state(_state(runs[0], RunStage.RECORDED))  # replaces the pending one
    store.save_state(_state(runs[1], RunStage.LOAD_RUNNING))
    store.save_state(_state(runs[150], RunStage.WORKERS_READY))  # in another ConfigMap
    for index in (150, 2, 10, 0):  # neither in plan nor in alphabetical order
        store.save_run(_record(runs[index]))
    store.save_aggregate(aggregate(experiment.spec, store.records()))

    again = _store(core, namespace, owner)
    again.open(experiment)
    assert again.states() == store.states()
    assert {i: s.stage for i, s in again.states().items()} == {
        0: RunStage.RECORDED, 1: RunStage.LOAD_RUNNING, 150: RunStage.WORKERS_READY
    }  # fmt: skip
    assert [r.index for r in again.records()] == [0, 2, 10, 150]
    assert again.records() == [_record_of(store, i) for i in (0, 2, 10, 150)]
    assert again.aggregate() == store.aggregate() and again.aggregate()
    assert resolved_experiment(again.experiment()) == resolved_experiment(experiment)
    assert again.location().to_k8s() == {"kind": "configmaps", "location": f"{namespace}/{NAME}-*"}
    kept = _configmaps(core, namespace, owner["uid"])
    assert sorted(c.metadata.name for c in kept) == [
        f"{NAME}-aggregate", f"{NAME}-records-0", f"{NAME}-records-1", f"{NAME}-results",
        f"{NAME}-states-0", f"{NAME}-states-1",
    ]  # fmt: skip
    for configmap in kept:
        assert configmap.metadata.labels == {
            "app.kubernetes.io/managed-by": "kvbench", "kvbench.io/experiment": NAME,
            "kvbench.io/experiment-uid": owner["uid"], "kvbench.io/component": "results",
        }  # fmt: skip
        assert [o.uid for o in configmap.metadata.owner_references] == [owner["uid"]]


def _record_of(store: ConfigMapStore, index: int) -> RunRecord:
    (record,) = [r for r in store.records() if r.index == index]
    return record


class _Spy:
    """The API, noting the ConfigMaps written and listed through it."""

    def __init__(self, api: kubernetes.client.CoreV1Api) -> None:
        self.api, self.written, self.listed = api, [], []

    def patch_namespaced_config_map(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.written.append(name)
        return self.api.patch_namespaced_config_map(name, *args, **kwargs)

    def list_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        found = self.api.list_namespaced_config_map(*args, **kwargs)
        self.listed += [c.metadata.name for c in found.items]
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _result_configmaps_of_the_job(
    core: kubernetes.client.CoreV1Api, namespace: str, owner: dict[str, Any], names: ChildNames
) -> list[str]:
    """The empty result ConfigMaps of an attempt, as the Kubernetes back end creates them."""
    ref = ExperimentRef(name=NAME, namespace=namespace, uid=owner["uid"])
    config = RunConfig.model_validate(
        {"model": "m", "target": {"kind": "url", "url": "http://svc:8000"},
         "workload": {"sharedPrefix": {"prefixes": [2]}},
         "point": {"concurrency": 4, "prefixes": 2}, "seed": 1}
    )  # fmt: skip
    results = result_configmap_names(names.prefix)
    for manifest in load_objects(ref, names, config, results):
        if manifest["metadata"]["name"] in results:
            core.create_namespaced_config_map(namespace, manifest)
    return results


def test_save_raw_keeps_what_the_job_wrote_and_writes_what_it_did_not(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    spy = _Spy(core)
    store = ConfigMapStore(spy, namespace, NAME, owner["uid"], owner)  # type: ignore[arg-type]
    store.open(experiment)
    written_by_job = ChildNames(experiment=NAME, index=3, attempt=1)
    names = _result_configmaps_of_the_job(core, namespace, owner, written_by_job)
    document = uuid.uuid4().bytes * 40000  # 640 KB
    write_result(core, namespace, names, document)
    where = store.save_raw(written_by_job, document)
    assert where == f"configmaps:{NAME}-r3-a1-result"
    assert spy.written == [], "the Job's document is not written again"

    not_written = ChildNames(experiment=NAME, index=3, attempt=2)
    other = uuid.uuid4().bytes * 80000  # 1.25 MiB: two chunks
    assert store.save_raw(not_written, other) == f"configmaps:{NAME}-r3-a2-result"
    made = core.read_namespaced_config_map(f"{NAME}-r3-a2-result-0", namespace).metadata
    like = core.read_namespaced_config_map(f"{NAME}-r3-a1-result-0", namespace).metadata
    assert made.labels == {**like.labels, "kvbench.io/attempt": "2"}
    assert made.owner_references == like.owner_references

    spy.listed.clear()
    again = ConfigMapStore(spy, namespace, NAME, owner["uid"], owner)  # type: ignore[arg-type]
    again.open(experiment)
    assert spy.listed == [f"{NAME}-results"], "open loads no result document"
    assert again.read_raw(where) == document
    assert again.read_raw(f"configmaps:{NAME}-r3-a2-result") == other
    with pytest.raises(FileNotFoundError, match="no complete document"):
        again.read_raw(f"configmaps:{NAME}-r4-a1-result")


@pytest.mark.parametrize("experiment", ["thousand"], indirect=True)
def test_a_thousand_runs_of_sixteen_pods_fit(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    runs = plan_experiment(experiment).runs
    assert len(runs) == 1000 and experiment.spec.total_workers == 16
    store = _store(core, namespace, owner)
    store.open(experiment)
    for run in runs:
        store.save_state(_state(run, RunStage.RECORDED))
        store.save_run(_record(run))
    store.save_aggregate(aggregate(experiment.spec, store.records()))

    kept = _configmaps(core, namespace, owner["uid"])
    sizes = {c.metadata.name: _stored_bytes(c) for c in kept}
    print(f"1,000 runs of 16 pods: {len(sizes)} ConfigMaps, {sum(sizes.values())} bytes, "
          f"the largest {max(sizes.values())}")  # fmt: skip
    assert len(sizes) == 1 + 10 + 10 + 1
    assert max(sizes.values()) < CONFIGMAP_BUDGET
    again = _store(core, namespace, owner)
    again.open(experiment)
    assert again.records() == store.records() and len(again.records()) == 1000
    assert again.states() == store.states()


def test_an_empty_store_holds_no_experiment(
    core: kubernetes.client.CoreV1Api, namespace: str, owner: dict[str, Any]
) -> None:
    assert _store(core, namespace, owner).stored_experiment() is None


def test_another_experiment_of_the_same_name_is_refused(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    _store(core, namespace, owner).open(experiment)
    newer = {**owner, "uid": str(uuid.uuid4())}
    with pytest.raises(StoreMismatch, match=f"another experiment \\(UID {owner['uid']}"):
        _store(core, namespace, newer).open(experiment)
    assert not _configmaps(core, namespace, newer["uid"])


def test_a_configmap_of_the_same_name_not_of_kvbench_is_refused_and_kept(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    body = {"metadata": {"name": f"{NAME}-results"}, "data": {"mine": "yes"}}
    core.create_namespaced_config_map(namespace, body)
    with pytest.raises(StoreMismatch, match="another experiment \\(UID None"):
        _store(core, namespace, owner).open(experiment)
    assert core.read_namespaced_config_map(f"{NAME}-results", namespace).data == {"mine": "yes"}


def test_a_changed_spec_is_refused_and_the_stored_one_kept(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    _store(core, namespace, owner).open(experiment)
    changed = parse_experiment({**EXAMPLE, "spec": {**EXAMPLE["spec"], "freshness": "none"}})
    with pytest.raises(StoreMismatch, match="spec changed"):
        _store(core, namespace, owner).open(changed)
    started = _store(core, namespace, owner).stored_experiment()
    assert started is not None
    assert resolved_experiment(started) == resolved_experiment(experiment)


def test_a_record_too_big_for_a_configmap_is_refused_before_writing(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    store = _store(core, namespace, owner)
    store.open(experiment)
    noise = base64.b64encode(random.Random(0).randbytes(1_500_000)).decode()  # ~1.1 MB gzip
    huge = _record(plan_experiment(experiment).runs[0]).model_copy(update={"error": noise})
    with pytest.raises(ConfigMapFull, match=f"{NAME}-records-0 would hold"):
        store.save_run(huge)
    again = _store(core, namespace, owner)
    again.open(experiment)
    assert again.records() == []


class _Flaky:
    """The API, answering the first patches with errors of a busy or restarting API server."""

    def __init__(self, api: kubernetes.client.CoreV1Api, errors: list[Exception]) -> None:
        self.api, self.errors = api, errors

    def patch_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        return self.api.patch_namespaced_config_map(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def test_writes_are_retried_on_conflicts_and_server_errors(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    run = plan_experiment(experiment).runs[0]
    errors: list[Exception] = [ApiException(status=409), ApiException(status=500)]
    store = ConfigMapStore(_Flaky(core, errors), namespace, NAME, owner["uid"], owner)  # type: ignore[arg-type]
    store.open(experiment)
    store.save_state(_state(run, RunStage.PENDING))
    assert errors == []
    store.save_state(_state(run, RunStage.WORKERS_STARTING))
    again = _store(core, namespace, owner)
    again.open(experiment)
    assert again.states()[0].stage == RunStage.WORKERS_STARTING


def test_deleting_the_experiment_deletes_its_configmaps(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    experiment: BenchmarkExperiment,
    owner: dict[str, Any],
) -> None:
    store = _store(core, namespace, owner)
    store.open(experiment)
    run = plan_experiment(experiment).runs[0]
    store.save_state(_state(run, RunStage.RECORDED))
    store.save_run(_record(run))
    store.save_raw(ChildNames(experiment=NAME, index=0, attempt=1), b"document")
    assert len(_configmaps(core, namespace, owner["uid"])) == 3 + 4
    objects = kubernetes.client.CustomObjectsApi(cluster.api_client())
    objects.delete_namespaced_custom_object(
        "kvbench.io", "v1alpha1", namespace, "benchmarkexperiments", NAME
    )
    wait_for(
        lambda: not _configmaps(core, namespace, owner["uid"]),
        120,
        "the garbage collector to delete the experiment's ConfigMaps",
        interval=1.0,
    )
