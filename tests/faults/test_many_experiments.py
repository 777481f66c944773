"""Twelve experiments created at once in three namespaces, each wanting one of the test
cluster's two GPUs: every one ends Succeeded, those that do not fit wait in Pending with the
reason and start as GPUs free (never while a GPU they need is free), the operator keeps up with
their status updates and its memory stays bounded."""

import contextlib
import itertools
import random
import threading
import time
from pathlib import Path

import kubernetes
import pytest
import urllib3
from experiments import GPU, small_experiment
from invariants import check_experiment

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import apply, get
from kvbench.testing.node.processes import pids_with_env

pytestmark = pytest.mark.slow

EXPERIMENTS, NAMESPACES, GPUS = 12, 3, 2
IDLE_GPU_GRACE = 15.0
"""Seconds a GPU may stay free while an experiment waits: the operator asks again every 5 s
and a run's pods take a few seconds to be placed."""
POKES = 200
"""Updates a minute to the experiments from another writer, beside the operator's own."""
MEMORY_LIMIT = 512 << 20
"""The chart's memory limit for the operator container."""


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _operator_rss(cluster: TestCluster, operator: dict) -> int:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    labels = operator["spec"]["selector"]["matchLabels"]
    pods = core.list_namespaced_pod(
        operator["metadata"]["namespace"],
        label_selector=",".join(f"{k}={v}" for k, v in labels.items()),
    ).items
    return sum(_rss(pid) for p in pods for pid in pids_with_env("POD_IP", p.status.pod_ip))


def _gpus_in_use(cluster: TestCluster) -> int:
    """GPUs requested by placed pods that have not ended (what the scheduler counts)."""
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    used = 0
    for pod in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        for container in pod.spec.containers:
            limits = container.resources.limits or {}
            used += int(limits.get("nvidia.com/gpu", 0))
    return used


def test_twelve_experiments_share_two_gpus_waiting_pending_for_them(
    cluster: TestCluster, operator: dict, seed: int
) -> None:
    namespaces = [f"many-{i}" for i in range(NAMESPACES)]
    for namespace in namespaces:
        cluster.ensure_namespace(namespace)
    names = [(namespaces[i % NAMESPACES], f"exp-{i:02d}") for i in range(EXPERIMENTS)]
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    updates, stop = [0], threading.Event()

    def count_updates() -> None:
        while not stop.is_set():
            watch = kubernetes.watch.Watch()
            with contextlib.suppress(urllib3.exceptions.HTTPError, kubernetes.client.ApiException):
                for event in watch.stream(custom.list_cluster_custom_object, GROUP, VERSION,
                                          PLURAL, timeout_seconds=30):  # fmt: skip
                    updates[0] += event["type"] == "MODIFIED"
                    if stop.is_set():
                        watch.stop()

    def poke() -> None:
        """Other writers' updates to the experiments (a GitOps tool's labels, a user's
        annotations): POKES a minute, which the operator's watch must take in too."""
        rng = random.Random(seed)
        for n in itertools.count():
            if stop.wait(60 / POKES):
                return
            namespace, name = rng.choice(names)
            with contextlib.suppress(kubernetes.client.ApiException):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name,
                    {"metadata": {"annotations": {"example.com/poke": str(n)}}},
                )  # fmt: skip

    counter = threading.Thread(target=count_updates, daemon=True)
    counter.start()
    began = time.monotonic()
    for namespace, name in names:
        document = small_experiment(name)
        document["spec"]["workers"] = [
            {"name": "gpu", "replicas": 1, "nodeSelector": GPU,
             "resources": {"limits": {"nvidia.com/gpu": 1}}}
        ]  # fmt: skip
        document["spec"]["workload"]["sharedPrefix"]["prefixes"] = [2]
        apply(cluster, namespace, document)
    threading.Thread(target=poke, daemon=True).start()

    idle_since: float | None = None
    worst_idle, peak_rss, pending_seen, waiting_messages = 0.0, 0, 0, set()
    try:
        while True:
            bodies = [get(cluster, ns, name) for ns, name in names]
            phases = [(b.get("status") or {}).get("phase", "Pending") for b in bodies]
            if all(p in ("Succeeded", "Failed") for p in phases):
                for (namespace, _), body in zip(names, bodies, strict=True):
                    verdict = check_experiment(cluster, namespace, body)
                    assert verdict.violations == [], verdict
                break
            assert time.monotonic() - began < 900, f"not all ended: {phases}"
            pending = [b for b, p in zip(bodies, phases, strict=True) if p == "Pending"]
            pending_seen = max(pending_seen, len(pending))
            waiting_messages |= {(b.get("status") or {}).get("message") or "" for b in pending}
            if pending and _gpus_in_use(cluster) < GPUS:
                idle_since = idle_since or time.monotonic()
                worst_idle = max(worst_idle, time.monotonic() - idle_since)
            else:
                idle_since = None
            peak_rss = max(peak_rss, _operator_rss(cluster, operator))
            time.sleep(1.0)
    finally:
        stop.set()
        core = kubernetes.client.CoreV1Api(cluster.api_client())
        for namespace in namespaces:
            core.delete_namespace(namespace)
    minutes = (time.monotonic() - began) / 60
    print(
        f"{EXPERIMENTS} experiments in {NAMESPACES} namespaces on {GPUS} GPUs: "
        f"{minutes:.1f} min, up to {pending_seen} Pending at once, "
        f"{updates[0]} updates to the experiments "
        f"({updates[0] / minutes:.0f}/min), operator peak RSS {peak_rss / 2**20:.0f} MiB, "
        f"longest GPU idle while one waited {worst_idle:.1f} s"
    )
    assert phases == ["Succeeded"] * EXPERIMENTS, phases
    assert pending_seen >= EXPERIMENTS - GPUS - 2, "most waited"
    assert any("needs 1 x 1 nvidia.com/gpu" in m for m in waiting_messages), waiting_messages
    assert worst_idle < IDLE_GPU_GRACE
    assert 0 < peak_rss < MEMORY_LIMIT
    assert updates[0] / minutes >= POKES, "the experiments saw the load asked for"
