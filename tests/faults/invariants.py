"""What must hold after any experiment, whatever was done to it: nothing lost, nothing counted
twice, nothing disturbed passed off as good, nothing left behind."""

import re
from dataclasses import dataclass, field
from typing import Any

import kubernetes

from kvbench.api import RunRecord, parse_experiment
from kvbench.kube.manifests import LABEL_UID
from kvbench.kube.store import ConfigMapStore
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload import build_sequence
from kvbench.plan import plan_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import namespace_objects
from kvbench.testing.wait import wait_for

__all__ = ["Verdict", "check_experiment", "check_nothing_left", "delete_leaving_nothing"]

_JOB = re.compile(r"^(?P<name>.+)-r(?P<index>\d+)-a(?P<attempt>\d+)-load$")


@dataclass
class Verdict:
    """The invariant checker's findings about one experiment: empty `violations` is a pass."""

    planned: int = 0
    recorded: int = 0
    failed: int = 0
    retried: int = 0
    violations: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    """Why each retried run's earlier attempts failed, for the campaign's report."""


def _records(cluster: TestCluster, namespace: str, name: str, uid: str) -> list[RunRecord]:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    store = ConfigMapStore(core, namespace, name, uid, {})
    store.load()
    return store.records()


def check_experiment(
    cluster: TestCluster,
    namespace: str,
    body: dict[str, Any],
    disturbed_pods: set[str] = frozenset(),  # type: ignore[assignment]
) -> Verdict:
    """Every planned run recorded exactly once with the planned sequence's digest, or failed
    with a reason; one load-generator Job per attempt at most, none beyond the attempts the
    record accounts for; no good record measured on a pod whose window was disturbed
    (`disturbed_pods`: UIDs the driver deleted, killed or restarted)."""
    meta = body["metadata"]
    document = {k: body[k] for k in ("apiVersion", "kind", "spec")}
    document["metadata"] = {"name": meta["name"], "namespace": namespace}
    experiment = parse_experiment(document)
    planned = plan_experiment(experiment).runs
    records = _records(cluster, namespace, meta["name"], meta["uid"])
    verdict = Verdict(planned=len(planned))
    by_index: dict[int, list[RunRecord]] = {}
    for record in records:
        by_index.setdefault(record.index, []).append(record)
    spec = experiment.spec
    for run in planned:
        found = by_index.get(run.index, [])
        if len(found) != 1:
            verdict.violations.append(f"run {run.index}: {len(found)} records, not one")
            continue
        record = found[0]
        verdict.retried += record.attempt > 1
        verdict.retries += [
            f"{run.index} attempt {f.attempt}: {f.reason}: {f.message.splitlines()[0][:200]}"
            for f in record.failed_attempts
        ]
        if record.error is not None:
            verdict.failed += 1
            if not record.error_reason:
                verdict.violations.append(f"run {run.index}: failed without a reason")
            continue
        verdict.recorded += 1
        expected = build_sequence(
            spec.workload, run.point, run.seed, spec.load.warmup, TokenSpace()
        ).digest
        if record.digest != expected:
            verdict.violations.append(f"run {run.index}: digest {record.digest} != {expected}")
        if len(record.failed_attempts) != record.attempt - 1:
            verdict.violations.append(
                f"run {run.index}: attempt {record.attempt} with "
                f"{len(record.failed_attempts)} failed attempts kept"
            )
        bad = {p.pod for p in record.pods if p.uid in disturbed_pods}
        if bad:
            verdict.violations.append(f"run {run.index}: recorded good on disturbed {bad}")
        if any(p.restart_count for p in record.pods):
            verdict.violations.append(f"run {run.index}: recorded good on a restarted worker")
    extra = set(by_index) - {r.index for r in planned}
    if extra:
        verdict.violations.append(f"records for unplanned runs {sorted(extra)}")
    verdict.violations += _job_violations(cluster, namespace, meta["uid"], by_index)
    return verdict


def _job_violations(
    cluster: TestCluster, namespace: str, uid: str, by_index: dict[int, list[RunRecord]]
) -> list[str]:
    batch = kubernetes.client.BatchV1Api(cluster.api_client())
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    problems = []
    seen: set[tuple[int, int]] = set()
    for job in batch.list_namespaced_job(namespace, label_selector=f"{LABEL_UID}={uid}").items:
        match = _JOB.match(job.metadata.name)
        if match is None:
            problems.append(f"Job {job.metadata.name}: not a run's load generator")
            continue
        key = (int(match["index"]), int(match["attempt"]))
        if key in seen:
            problems.append(f"two Jobs for run {key[0]} attempt {key[1]}")
        seen.add(key)
        records = by_index.get(key[0], [])
        if records and key[1] > records[0].attempt:
            problems.append(f"Job {job.metadata.name} beyond the recorded attempt")
        pods = core.list_namespaced_pod(
            namespace, label_selector=f"job-name={job.metadata.name}"
        ).items
        succeeded = [p for p in pods if p.status.phase == "Succeeded"]
        if len(succeeded) > 1:
            problems.append(f"Job {job.metadata.name}: {len(succeeded)} pods measured")
    return problems


_CLUSTER_OWN = {"configmap/kube-root-ca.crt", "serviceaccount/default"}


def check_nothing_left(cluster: TestCluster, namespace: str) -> list[str]:
    """Everything in `namespace` that is not the cluster's own: after the experiments are
    deleted, any of it is an orphan."""
    return sorted(set(namespace_objects(cluster, namespace)) - _CLUSTER_OWN)


def delete_leaving_nothing(cluster: TestCluster, namespace: str, name: str) -> None:
    """`kubectl delete bx NAME`, then every child must go (the garbage collector's work)."""
    deleted = cluster.kubectl("delete", "bx", name, "-n", namespace, "--timeout=180s")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: check_nothing_left(cluster, namespace) == [], 120,
             "the garbage collector to remove every child")  # fmt: skip
