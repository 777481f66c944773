"""An experiment as a GitOps tool handles it: applied again and again (and labelled by the
tool), it is one experiment run once; Argo CD's health check (the chart's Lua) and Flux's
kstatus read the statuses the operator really wrote: Progressing / InProgress while it runs,
Healthy / Current once it succeeded, Degraded / Failed once it failed."""

import json
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from e2e_helpers import GPU, article_002_document, get, restart_operator, wait_phase

from kvbench.api import parse_experiment
from kvbench.kube.manifests import LABEL_UID
from kvbench.kube.store import ConfigMapStore
from kvbench.plan import plan_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.gitops import argocd_health, kstatus
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow


def _small(name: str, trials: int) -> dict[str, Any]:
    document = article_002_document(name, [2], trials=trials)
    document["spec"]["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU}]
    return document


def _kubectl_apply(cluster: TestCluster, path: Path, namespace: str) -> str:
    applied = cluster.kubectl("apply", "--validate=false", "-n", namespace, "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    return applied.stdout.strip()


def _verdicts(body: dict[str, Any]) -> tuple[str, str]:
    return argocd_health(body).status, kstatus(body).status


def _keep(tmp_path: Path, label: str, body: dict[str, Any]) -> None:
    """The real status a verdict was given on, kept beside the test's output."""
    (tmp_path / f"{label}.json").write_text(json.dumps(body, indent=1))


def _started_events(cluster: TestCluster, namespace: str, uid: str) -> int:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}")
    return sum(1 for e in events.items if e.reason == "Started")


def test_applied_twice_is_one_experiment_run_once_and_reads_healthy(
    cluster: TestCluster, namespace: str, operator: dict, tmp_path: Path
) -> None:
    name = "gitops"
    path = tmp_path / f"{name}.yaml"
    document = _small(name, trials=2)
    path.write_text(yaml.safe_dump(document))
    assert _kubectl_apply(cluster, path, namespace).endswith("created")
    assert _kubectl_apply(cluster, path, namespace).endswith("unchanged")

    def in_window() -> bool:
        current = (get(cluster, namespace, name).get("status") or {}).get("current") or {}
        return current.get("stage") == "load-running"

    wait_for(in_window, 600, "a measured window")
    running = get(cluster, namespace, name)
    _keep(tmp_path, "running", running)
    assert _verdicts(running) == ("Progressing", "InProgress"), running["status"]
    current = running["status"]["current"]
    assert argocd_health(running).message.endswith(f"runs, run {current['id']} load-running")

    done = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    _keep(tmp_path, "succeeded", done)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert _verdicts(done) == ("Healthy", "Current")
    assert argocd_health(done).message == "2/2 runs recorded"

    uid = done["metadata"]["uid"]
    assert _kubectl_apply(cluster, path, namespace).endswith("unchanged")
    document["metadata"]["labels"] = {"argocd.argoproj.io/instance": "benchmarks"}
    path.write_text(yaml.safe_dump(document))
    assert _kubectl_apply(cluster, path, namespace).endswith("configured")
    restart_operator(cluster, operator)
    time.sleep(10)

    after = get(cluster, namespace, name)
    assert after["metadata"]["uid"] == uid, "one experiment"
    assert after["metadata"]["generation"] == done["metadata"]["generation"]
    assert after["status"]["finishedAt"] == done["status"]["finishedAt"]
    assert _verdicts(after) == ("Healthy", "Current")
    assert _started_events(cluster, namespace, uid) == 1, "never started again"
    batch = kubernetes.client.BatchV1Api(cluster.api_client())
    jobs = batch.list_namespaced_job(namespace, label_selector=f"{LABEL_UID}={uid}").items
    assert sorted(j.metadata.name for j in jobs) == [f"{name}-r0-a1-load", f"{name}-r1-a1-load"]
    store = ConfigMapStore(kubernetes.client.CoreV1Api(cluster.api_client()), namespace, name,
                           uid, {})  # fmt: skip
    store.load()
    assert [(r.index, r.attempt) for r in store.records()] == [(0, 1), (1, 1)]


def test_a_failed_experiment_reads_degraded(
    cluster: TestCluster, namespace: str, operator: dict, tmp_path: Path
) -> None:
    name = "gitops-failed"
    document = _small(name, trials=1)
    document["spec"]["engine"]["extraArgs"] = ["--load-seconds", "600"]
    document["spec"]["timeouts"] = {"workersReady": "10s"}
    document["spec"]["execution"] = {"retries": 0}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    _kubectl_apply(cluster, path, namespace)

    starting = wait_phase(cluster, namespace, name, {"Running"}, 300)
    _keep(tmp_path, "starting", starting)
    assert _verdicts(starting) == ("Progressing", "InProgress"), starting["status"]

    failed = wait_phase(cluster, namespace, name, {"Failed", "Succeeded"}, 300)
    _keep(tmp_path, "failed", failed)
    assert failed["status"]["phase"] == "Failed"
    argo, flux = argocd_health(failed), kstatus(failed)
    assert (argo.status, flux.status) == ("Degraded", "Failed")
    run = plan_experiment(parse_experiment(document)).runs[0]
    assert argo.message == f"1 run(s) failed: {run.id}"
