"""Virtual time refuses, before anything runs, what it does not model, naming the field; the
Kubernetes back end refuses virtual time (it has no pods to run)."""

import copy
from pathlib import Path

import yaml

from kvbench.api import parse_experiment
from kvbench.kube.cluster import kube_problems
from kvbench.runner.cluster.virtual.preflight import virtual_problems

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())


def _spec(change):
    document = copy.deepcopy(BASE)
    change(document["spec"])
    return parse_experiment(document).spec


def test_router_dynamo_and_external_arms_are_refused_by_field() -> None:
    """Catches a router arm run in virtual time as if it were a Service (its routing is a real
    process's, not modelled)."""

    def arms(spec):
        spec["routing"] = [
            {"name": "service", "service": {}},
            {"name": "affinity", "prefixAffinity": {}},
            {"name": "kv", "router": {"implementation": "vllm-router", "policy": "kv_aware"}},
            {
                "name": "ext",
                "external": {"url": "http://gateway:8000", "podSelector": {"app": "vllm"}},
            },
        ]

    problems = virtual_problems(_spec(arms))
    assert [p.split(":")[0] for p in problems] == [
        "spec.routing[2] (kv).router",
        "spec.routing[3] (ext).external",
    ]
    assert "kv_aware" in problems[0]


def test_service_and_affinity_arms_run() -> None:
    def arms(spec):
        spec["routing"] = [{"name": "s", "service": {}}, {"name": "a", "prefixAffinity": {}}]

    assert virtual_problems(_spec(arms)) == []


def test_fields_without_processes_are_refused() -> None:
    """Catches a spec field that would silently do nothing in virtual time."""

    def change(spec):
        spec["routing"] = [{"name": "s", "service": {}}]
        spec["metrics"] = {"source": "prometheus", "prometheusUrl": "http://prometheus:9090"}
        spec["cleanup"] = {"keepWorkers": True}
        spec["simulator"] = {"profile": "a100-ish"}

    problems = virtual_problems(_spec(change))
    assert [p.split(":")[0] for p in problems] == [
        "spec.simulator.profile",
        "spec.metrics.source",
        "spec.cleanup.keepWorkers",
    ]


def test_the_cluster_refuses_virtual_time() -> None:
    """Catches an operator that would accept `simulator.mode: virtual` and deploy pods that
    run on the wall clock instead."""

    def virtual(spec):
        spec["routing"] = [{"name": "s", "service": {}}]
        spec["simulator"] = {"mode": "virtual"}

    [problem] = kube_problems(_spec(virtual))
    assert problem.startswith("spec.simulator.mode: virtual")


def test_the_cluster_refuses_a_simulated_shared_gpu() -> None:
    """Catches `simulation.workersPerGpu` silently doing nothing on a cluster, where each
    simulated pod is its own process with no share to see."""

    def shared(spec):
        spec["routing"] = [{"name": "s", "service": {}}]
        spec["simulator"] = {"onCluster": True}
        spec["workers"][0]["simulation"] = {"workersPerGpu": 2}

    [problem] = kube_problems(_spec(shared))
    assert problem.startswith("spec.workers[0] (") and ".simulation.workersPerGpu:" in problem
