"""Bad specs fail with a message that names the field (the table the foundation issue asks for)."""

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import SpecError, load_experiment, parse_experiment

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[last]

    return mutate


# (id, mutation, text the message must contain: the field's path, and what is wrong)
CASES: list[tuple[str, Mutation, list[str]]] = [
    ("wrong-api-version", _set("apiVersion", "kvbench.io/v1"), ["apiVersion"]),
    ("wrong-kind", _set("kind", "Experiment"), ["kind"]),
    ("bad-name", _set("metadata.name", "Prefix_Cache"), ["metadata.name"]),
    ("missing-model", _drop("spec.engine.model"), ["spec.engine.model", "Field required"]),
    ("misspelled-key", _set("spec.engine.maxModelLength", 4096), ["spec.engine.maxModelLength"]),
    (
        "gpu-util-above-1",
        _set("spec.engine.gpuMemoryUtilization", 1.5),
        ["spec.engine.gpuMemoryUtilization"],
    ),
    (
        "kv-bytes-not-quantity",
        _set("spec.engine.kvCacheMemoryBytes", "one gig"),
        ["spec.engine.kvCacheMemoryBytes", "quantity"],
    ),
    ("kv-dtype-unknown", _set("spec.engine.kvCacheDtype", "int4"), ["spec.engine.kvCacheDtype"]),
    ("block-size-odd", _set("spec.engine.blockSize", 24), ["spec.engine.blockSize"]),
    ("no-workers", _set("spec.workers", []), ["spec.workers"]),
    ("zero-replicas", _set("spec.workers.0.replicas", 0), ["spec.workers[0].replicas"]),
    ("pool-name-twice", _set("spec.workers.1.name", "gpu24"), ["workers", "gpu24", "unique"]),
    (
        "gpu-quantity-bad",
        _set("spec.workers.0.resources.limits", {"nvidia.com/gpu": "lots"}),
        ["spec.workers[0].resources.limits.nvidia.com/gpu"],
    ),
    (
        "toleration-effect",
        _set("spec.workers.0.tolerations", [{"key": "a", "effect": "Never"}]),
        ["spec.workers[0].tolerations[0].effect"],
    ),
    (
        "arm-two-kinds",
        _set("spec.routing.0", {"name": "x", "service": {}, "router": {}}),
        ["spec.routing[0]", "exactly one"],
    ),
    ("arm-no-kind", _set("spec.routing.0", {"name": "x"}), ["spec.routing[0]", "exactly one"]),
    (
        "router-policy",
        _set("spec.routing.0", {"name": "r", "router": {"policy": "smart"}}),
        ["spec.routing[0].router.policy"],
    ),
    (
        "router-needs-text",
        _set("spec.routing.0", {"name": "r", "router": {"policy": "cache_aware"}}),
        ["router.policy", "workload.promptFormat"],
    ),
    (
        "external-no-selector",
        _set("spec.routing.0", {"name": "e", "external": {"url": "http://x"}}),
        ["spec.routing[0].external.podSelector"],
    ),
    (
        "external-bad-url",
        _set("spec.routing.0", {"name": "e", "external": {"url": "x", "podSelector": {"a": "b"}}}),
        ["spec.routing[0].external.url"],
    ),
    (
        "affinity-needs-prefixes",
        lambda d: d["spec"].update(
            routing=[{"name": "a", "prefixAffinity": {}}],
            workload={"random": {"inputTokens": {"mean": 64}, "outputTokens": {"mean": 8}}},
        ),
        ["prefixAffinity", "workload.sharedPrefix"],
    ),
    (
        "two-workloads",
        _set("spec.workload.random", {"inputTokens": {"mean": 1}, "outputTokens": {"mean": 1}}),
        ["spec.workload", "exactly one"],
    ),
    (
        "prefixes-zero",
        _set("spec.workload.sharedPrefix.prefixes", [0, 2]),
        ["spec.workload.sharedPrefix.prefixes[0]"],
    ),
    (
        "prefixes-repeated",
        _set("spec.workload.sharedPrefix.prefixes", [2, 2]),
        ["spec.workload.sharedPrefix.prefixes", "twice"],
    ),
    (
        "request-too-long",
        _set("spec.workload.sharedPrefix.prefixTokens", 4000),
        ["maxModelLen", "workload"],
    ),
    (
        "length-min-above-max",
        lambda d: d["spec"].update(
            workload={
                "random": {
                    "inputTokens": {"mean": 64, "distribution": "uniform", "min": 100, "max": 10},
                    "outputTokens": {"mean": 8},
                }
            }
        ),
        ["spec.workload.random.inputTokens", "min"],
    ),
    (
        "normal-needs-stddev",
        lambda d: d["spec"].update(
            workload={
                "random": {
                    "inputTokens": {"mean": 64, "distribution": "normal", "max": 100},
                    "outputTokens": {"mean": 8},
                }
            }
        ),
        ["spec.workload.random.inputTokens", "stddev"],
    ),
    ("concurrency-zero", _set("spec.load.concurrency", [0]), ["spec.load.concurrency[0]"]),
    (
        "concurrency-repeated",
        _set("spec.load.concurrency", [4, 4]),
        ["spec.load.concurrency", "twice"],
    ),
    ("rate-negative", _set("spec.load.requestRates", [-1.0]), ["spec.load.requestRates[0]"]),
    ("trials-zero", _set("spec.load.trials", 0), ["spec.load.trials"]),
    ("connection-unknown", _set("spec.load.connection", "reuse"), ["spec.load.connection"]),
    ("freshness-unknown", _set("spec.freshness", "reboot"), ["spec.freshness"]),
    (
        "reset-cache-without-dev-mode",
        _set("spec.freshness", "reset-cache"),
        ["freshness reset-cache", "VLLM_SERVER_DEV_MODE"],
    ),
    (
        "prometheus-without-url",
        _set("spec.metrics", {"source": "prometheus"}),
        ["spec.metrics", "prometheusUrl"],
    ),
    (
        "timeout-not-duration",
        _set("spec.timeouts", {"run": "an hour"}),
        ["spec.timeouts.run", "duration"],
    ),
    (
        "variant-name-twice",
        _set("spec.variants", [{"name": "a"}, {"name": "a"}]),
        ["variants", "unique"],
    ),
    (
        "variant-unknown-flag",
        _set("spec.variants", [{"name": "a", "engine": {"chunk": 512}}]),
        ["spec.variants[0].engine.chunk"],
    ),
    (
        "variant-breaks-engine",
        _set(
            "spec.variants",
            [
                {
                    "name": "nochunk",
                    "engine": {"enableChunkedPrefill": False, "maxNumBatchedTokens": 512},
                }
            ],
        ),
        ["variants[0] (nochunk).engine", "maxNumBatchedTokens"],
    ),
    (
        "interference-concurrency",
        lambda d: d["spec"].update(workload={"interference": {}}),
        ["load.concurrency", "interference"],
    ),
    (
        "env-value-and-source",
        _set(
            "spec.engine.env",
            [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s"}}}],
        ),
        ["spec.engine.env[0]", "not both"],
    ),
    (
        "model-cache-two-sources",
        _set("spec.engine.modelCache", {"hostPath": "/models", "persistentVolumeClaim": "pvc"}),
        ["spec.engine.modelCache", "exactly one"],
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_names_the_field(mutate: Mutation, expected: list[str]) -> None:
    document = copy.deepcopy(BASE)
    mutate(document)
    with pytest.raises(SpecError) as caught:
        parse_experiment(document, "case.yaml")
    message = str(caught.value)
    for text in expected:
        assert text in message, f"{text!r} not in:\n{message}"


def test_the_table_covers_at_least_fifteen_kinds_of_mistake() -> None:
    assert len({c[0] for c in CASES}) >= 15


def test_the_base_document_is_valid() -> None:
    assert parse_experiment(copy.deepcopy(BASE)).spec.total_workers == 6


def test_files_with_broken_yaml_or_several_documents(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_experiment(broken)
    double = tmp_path / "double.yaml"
    double.write_text(yaml.safe_dump(BASE) + "---\n" + yaml.safe_dump(BASE))
    with pytest.raises(SpecError, match="one YAML document, found 2"):
        load_experiment(double)
