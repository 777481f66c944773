"""The generated CRD on a real API server (1.20): it is accepted as structural, every example
applies, the schema rejects what it can at `kubectl apply`, and the printer columns and the
status subresource work.

kubectl 1.20 validates a CRD against its own, older schema of CRDs and refuses the
`x-kubernetes-validations` rules (CEL, Kubernetes 1.25+) as unknown fields; the API server
itself drops them. So on such clusters the CRD goes in with `--validate=false`, and the
structural schema alone does the validation shown here."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kvbench.testing.cluster import TestCluster

ROOT = Path(__file__).resolve().parents[1].parent
CRD = ROOT / "crds" / "benchmarkexperiments.kvbench.io.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())


@pytest.fixture(scope="module")
def crd(cluster: TestCluster) -> str:
    refused = cluster.kubectl("apply", "--dry-run=client", "-f", str(CRD))
    assert "x-kubernetes-validations" in refused.stderr, "kubectl 1.20 knows no CEL rules"
    applied = cluster.kubectl("apply", "--validate=false", "-f", str(CRD))
    assert applied.returncode == 0, applied.stderr
    name = "crd/benchmarkexperiments.kvbench.io"
    ready = cluster.kubectl("wait", "--for=condition=established", name, "--timeout=60s")
    assert ready.returncode == 0, ready.stderr
    conditions = json.loads(cluster.kubectl("get", name, "-o", "json").stdout)["status"]
    types = {c["type"]: c["status"] for c in conditions["conditions"]}
    assert types.get("NonStructuralSchema", "False") == "False", conditions
    return name


def _apply(
    cluster: TestCluster, namespace: str, document: dict[str, Any], tmp_path: Path, *flags: str
):
    path = tmp_path / f"{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    return cluster.kubectl("apply", "-n", namespace, *flags, "-f", str(path))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_applies(
    crd: str, cluster: TestCluster, namespace: str, example: Path
) -> None:
    result = cluster.kubectl("apply", "-n", namespace, "-f", str(example))
    assert result.returncode == 0, result.stderr
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    stored = json.loads(cluster.kubectl("get", "bx", name, "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["routing"], "the spec survived pruning"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if isinstance(node, list) else last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_set("spec.load.concurrency", [0]), "spec.load.concurrency"),
        (_set("spec.engine.kvCacheDtype", "int4"), "spec.engine.kvCacheDtype"),
        (_set("spec.engine.gpuMemoryUtilization", 0), "spec.engine.gpuMemoryUtilization"),
        (_set("spec.routing.0", {"name": "x", "service": {}, "router": {}}), "spec.routing"),
        (_set("spec.workers.0.replicas", 0), "spec.workers"),
        (_set("spec.load.requestTimeout", "ten minutes"), "spec.load.requestTimeout"),
        (_set("spec.engine.kvCacheMemoryBytes", "lots"), "spec.engine.kvCacheMemoryBytes"),
        (_set("spec.workers.1.name", "gpu24"), "spec.workers"),
        (lambda d: d["spec"].pop("workload"), 'missing required field "workload"'),
    ],
    ids=["concurrency-0", "enum", "exclusive-minimum", "two-arm-kinds", "replicas-0",
         "duration", "quantity", "duplicate-pool-name", "required"],
)  # fmt: skip
def test_the_schema_rejects_at_apply(
    crd: str, cluster: TestCluster, namespace: str, tmp_path: Path, mutate, field: str
) -> None:
    document = copy.deepcopy(BASE)
    document["metadata"]["name"] = "bad"
    mutate(document)
    result = _apply(cluster, namespace, document, tmp_path)
    assert result.returncode != 0, "kubectl accepted an invalid spec"
    assert field in result.stderr, result.stderr
    unchecked = _apply(cluster, namespace, document, tmp_path, "--validate=false")
    assert unchecked.returncode != 0, "the API server itself accepted an invalid spec"
    assert "is invalid" in unchecked.stderr, unchecked.stderr


def test_printer_columns_and_status_subresource(
    crd: str, cluster: TestCluster, namespace: str, tmp_path: Path
) -> None:
    assert _apply(cluster, namespace, copy.deepcopy(BASE), tmp_path).returncode == 0
    status = {"status": {"phase": "Running", "observedGeneration": 1,
                         "progress": {"done": 3, "total": 36, "display": "3/36",
                                      "currentRun": "default.service.p2-c16.t1"},
                         "lastRun": {"id": "default.service.p2-c16.t0", "index": 2,
                                     "attempt": 1, "requestHitRate": 0.95}}}  # fmt: skip
    objects = kubernetes.client.CustomObjectsApi(cluster.api_client())
    objects.patch_namespaced_custom_object_status(
        "kvbench.io", "v1alpha1", namespace, "benchmarkexperiments", "prefix-cache-service", status
    )
    table = cluster.kubectl("get", "bx", "-n", namespace)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "PROGRESS", "CURRENT", "HIT", "RATE", "AGE"]
    assert row.split()[:5] == ["prefix-cache-service", "Running", "3/36",
                               "default.service.p2-c16.t1", "0.95"]  # fmt: skip
