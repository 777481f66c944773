"""`kubectl apply` a BenchmarkExperiment and the operator, in the cluster (on real nodes) under
the chart's RBAC, runs it end to end: fresh simulated workers on GPU nodes for every run, the load
generator's Job on a CPU node, per-pod results in the status and the ConfigMaps, exactly once
across operator restarts, and nothing left behind."""

import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import kubernetes
import pytest
from e2e_helpers import (
    CPU_NODE_SHARE,
    GPU,
    apply,
    article_002_document,
    experiment_document,
    get,
    restart_operator,
    results_store,
    wait_phase,
)

from kvbench.api import GROUP, PLURAL, VERSION, parse_experiment
from kvbench.kube.manifests import LABEL_UID
from kvbench.plan import plan_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import children
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow


def _kvbench(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "kvbench", *args], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip


@pytest.mark.timeout(1200)  # the real cluster's first start (image builds) counts in its setup
def test_article_002_scaled_down_survives_operator_restarts(
    cluster: TestCluster, namespace: str, operator: dict, tmp_path: Path
) -> None:
    name = "article-002"
    apply(cluster, namespace, article_002_document(name, [2, 12], trials=1))
    started = time.monotonic()

    def in_window(index: int):
        def check() -> bool:
            current = (get(cluster, namespace, name).get("status") or {}).get("current") or {}
            return current.get("index") == index and current.get("stage") == "load-running"

        return check

    # One restart in a measured window, one between the runs (while run 1's workers start):
    # the operator-kill campaign (tests/faults) covers every other step.
    wait_for(in_window(0), 600, "run 0's measured window")
    restart_operator(cluster, operator)
    wait_for(
        lambda: (get(cluster, namespace, name).get("status") or {})
        .get("progress", {}).get("done", 0) >= 1,
        900, "run 0 recorded",
    )  # fmt: skip
    restart_operator(cluster, operator)
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    elapsed = time.monotonic() - started
    status = body["status"]
    assert status["phase"] == "Succeeded", status
    print(f"scaled-down article 002 (2 runs, 6 workers): {elapsed:.0f} s end to end")
    assert status["progress"]["display"] == "2/2"
    assert status["observedGeneration"] == body["metadata"]["generation"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Succeeded"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"
    assert len(status["lastRun"]["pods"]) == 6

    store = results_store(cluster, namespace, name)
    records = store.records()
    for record in records:
        summary = record.summary
        queries = [p.prefix_cache_queries for p in record.pods]
        print(f"run {record.index}: {summary.requests} requests, {summary.errors} errors, "
              f"request hit rate {summary.request_hit_rate}, token hit rate "
              f"{summary.token_hit_rate}, queries {queries}")  # fmt: skip
    assert [r.index for r in records] == [0, 1]
    assert all(r.error is None and r.attempt == 1 for r in records), "exactly once, none retried"
    uids = [p.uid for r in records for p in r.pods]
    assert len(uids) == 12 and len(set(uids)) == 12, "every run on new worker pods"
    assert {p.kv_cache_tokens for r in records for p in r.pods} == {9360}
    gaps = [
        (b.started_at - a.finished_at).total_seconds() - max(p.startup_seconds for p in b.pods)
        for a, b in pairwise(records)
    ]
    print(f"operator overhead between runs beyond pod start-up: {[round(g, 1) for g in gaps]} s")
    two = [r for r in records if r.point.prefixes == 2]
    for record in two:
        misses = round(record.summary.requests * (1 - record.summary.request_hit_rate))
        assert misses == 6 * 2 - 2, "exactly the unwarmed (worker, prefix) pairs miss"
    twelve = next(p for p in store.aggregate() if p.point.prefixes == 12)
    assert twelve.request_hit_rate == pytest.approx(twelve.predicted_hit_rate, abs=0.1)

    batch = kubernetes.client.BatchV1Api(cluster.api_client())
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    uid = body["metadata"]["uid"]
    jobs = batch.list_namespaced_job(namespace, label_selector=f"{LABEL_UID}={uid}").items
    assert sorted(j.metadata.name for j in jobs) == [f"{name}-r{i}-a1-load" for i in range(2)]
    for job in jobs:
        pod = core.list_namespaced_pod(namespace, label_selector=f"job-name={job.metadata.name}")
        node = core.read_node(pod.items[0].spec.node_name)
        assert "nvidia.com/gpu.present" not in (node.metadata.labels or {}), "a CPU node"
    wait_for(
        lambda: not [c for c in children(cluster, namespace, uid) if c.startswith("pod/")
                     and "-load-" not in c],
        120, "the workers to be gone",
    )  # fmt: skip

    from_cluster = _kvbench(cluster, "report", f"bx/{name}", "-n", namespace, "--out",
                            str(tmp_path / "cluster-report"))  # fmt: skip
    assert from_cluster.returncode == 0, from_cluster.stderr
    directory = str(tmp_path / "d")
    fetched = _kvbench(cluster, "fetch", f"bx/{name}", "-n", namespace, "--out", directory)
    assert fetched.returncode == 0, fetched.stderr
    from_directory = _kvbench(cluster, "report", directory)
    assert from_directory.returncode == 0, from_directory.stderr
    tables = lambda out: out.split("Hit rate", 1)[1].split("written:")[0]  # noqa: E731
    assert tables(from_cluster.stdout) == tables(from_directory.stdout)


@pytest.mark.timeout(1200)
def test_service_routers_and_affinity_on_one_seed(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    name = "four-arms"
    document = article_002_document(name, [12], trials=1)
    document["spec"]["workers"] = [{"name": "gpu", "replicas": 3, "nodeSelector": GPU,
                                    "simulation": {"profile": "qwen3-0.6b-24gb"}}]  # fmt: skip
    document["spec"]["workload"]["promptFormat"] = "text"
    document["spec"]["routing"] = [
        {"name": "service", "service": {}},
        {"name": "cache-aware", "router": {"policy": "cache_aware", "resources": CPU_NODE_SHARE}},
        {"name": "kv-aware", "router": {"policy": "kv_aware", "resources": CPU_NODE_SHARE}},
        {"name": "affinity", "prefixAffinity": {}},
    ]
    apply(cluster, namespace, document)
    wait_phase(cluster, namespace, name, {"Running"}, 300)
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    seed = document["spec"]["load"]["seed"]
    changed = {"spec": {"load": {**document["spec"]["load"], "seed": seed + 1}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, changed)
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    assert conditions["SpecChanged"]["status"] == "True", "a 1.20 server lets the change in"
    records = {r.arm: r for r in results_store(cluster, namespace, name).records()}
    planned = plan_experiment(parse_experiment(document)).runs
    assert [r.seed for r in records.values()] == [p.seed for p in planned], "the started spec"
    assert len({r.digest for r in records.values()}) == 1, "one request sequence for every arm"
    service, affinity = records["service"].summary, records["affinity"].summary
    assert affinity.request_hit_rate > service.request_hit_rate + 0.2
    assert records["cache-aware"].summary.request_hit_rate > service.request_hit_rate
    # kv_aware: the router image's launcher, subscribed to every worker pod's KV events.
    kv_aware = records["kv-aware"]
    print(f"kv_aware hit rate {kv_aware.summary.request_hit_rate:.3f} vs the Service's "
          f"{service.request_hit_rate:.3f}; KV event batches: {kv_aware.kv_events}")  # fmt: skip
    assert kv_aware.kv_events is not None and len(kv_aware.kv_events) == 3, kv_aware.kv_events
    assert all(n > 0 for n in kv_aware.kv_events.values()), kv_aware.kv_events
    assert kv_aware.summary.request_hit_rate > service.request_hit_rate
    assert [r.arm for r in records.values() if r.kv_events is not None] == ["kv-aware"]


def test_invalid_specs_fail_naming_the_field_with_no_child(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    rejected = experiment_document("prefix-cache-service.yaml", "bad-schema")
    rejected["spec"]["workload"]["sharedPrefix"]["prefixes"] = [0]
    path = Path(cluster.workdir) / "bad-schema.json"
    path.write_text(json.dumps(rejected))
    refused = cluster.kubectl("apply", "--validate=false", "-n", namespace, "-f", str(path))
    assert refused.returncode != 0 and "prefixes" in refused.stderr, "the API server refuses"

    name = "bad-rule"
    document = experiment_document("prefix-cache-service.yaml", name, freshness="reset-cache")
    apply(cluster, namespace, document)
    body = wait_phase(cluster, namespace, name, {"Failed", "Succeeded"}, 120)
    assert body["status"]["phase"] == "Failed"
    failed = {c["type"]: c for c in body["status"]["conditions"]}["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "InvalidSpec"
    assert "VLLM_SERVER_DEV_MODE" in failed["message"]
    assert children(cluster, namespace, body["metadata"]["uid"]) == []


def test_a_worker_never_ready_fails_the_run_naming_the_pod_and_cleans_up(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    name = "never-ready"
    document = article_002_document(name, [2], trials=1)
    document["spec"]["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU}]
    document["spec"]["engine"]["extraArgs"] = ["--load-seconds", "600"]
    document["spec"]["timeouts"] = {"workersReady": "10s"}
    document["spec"]["execution"] = {"retries": 0}
    apply(cluster, namespace, document)
    body = wait_phase(cluster, namespace, name, {"Failed", "Succeeded"}, 300)
    assert body["status"]["phase"] == "Failed"
    record = results_store(cluster, namespace, name).records()[0]
    assert record.error_reason == "WorkersNotReady"
    assert f"{name}-gpu-0" in record.error and "10 s" in record.error
    uid = body["metadata"]["uid"]
    wait_for(
        lambda: not [c for c in children(cluster, namespace, uid)
                     if c.split("/")[0] in ("pod", "statefulset")],
        120, "the workers to be gone",
    )  # fmt: skip


def test_two_side_by_side_and_deleting_one_leaves_nothing_of_it(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    kept, deleted = "side-a", "side-b"
    for name in (kept, deleted):
        document = article_002_document(name, [2], trials=1)
        document["spec"]["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU}]
        apply(cluster, namespace, document)
    wait_for(
        lambda: ((get(cluster, namespace, deleted).get("status") or {}).get("current") or {})
        .get("stage") == "load-running",
        600, "the second experiment's measured window",
    )  # fmt: skip
    uid = get(cluster, namespace, deleted)["metadata"]["uid"]
    removed = cluster.kubectl("delete", "bx", deleted, "-n", namespace, "--timeout=180s")
    assert removed.returncode == 0, removed.stderr
    wait_for(lambda: children(cluster, namespace, uid) == [], 180, f"{deleted}'s children gone")
    body = wait_phase(cluster, namespace, kept, {"Succeeded", "Failed"}, 600)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    record = results_store(cluster, namespace, kept).records()[0]
    assert all(p.pod.startswith(f"{kept}-") for p in record.pods), "only its own pods"
