"""Bad specs fail with a message that names the field (the table the foundation issue asks for).

Each case is a mistake and its fix: the fixed document validates and the broken one is
rejected with an error reported at the field the mistake broke."""

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import API_VERSION, SpecError, load_experiment, parse_experiment

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())

Build = Callable[[dict[str, Any], bool], None]
"""Brings a copy of the base document to one case: its context, then (when `broken`) the
mistake. Without the mistake the document must validate, so a case's rejection is its
mistake's and no other's."""


def _node(doc: dict[str, Any], parents: list[str]) -> Any:
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    return node


def _value(path: str, bad: Any, good: Any) -> Build:
    """`path` (dotted, list indices as numbers) set to `bad`, or to the valid `good`."""

    def build(doc: dict[str, Any], broken: bool) -> None:
        *parents, last = path.split(".")
        node = _node(doc, parents)
        value = copy.deepcopy(bad if broken else good)
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return build


def _missing(path: str) -> Build:
    """`path` removed (the base document has it)."""

    def build(doc: dict[str, Any], broken: bool) -> None:
        *parents, last = path.split(".")
        if broken:
            del _node(doc, parents)[last]

    return build


def _key(path: str, bad: str, good: str, value: Any) -> Build:
    """`value` under the key `bad` (a misspelling) instead of `good`, in the mapping `path`."""

    def build(doc: dict[str, Any], broken: bool) -> None:
        node = _node(doc, path.split("."))
        node.pop(good, None)
        node[bad if broken else good] = value

    return build


def _with(context: Build, mistake: Build) -> Build:
    """`context` always (it is valid alone), then `mistake` when broken."""

    def build(doc: dict[str, Any], broken: bool) -> None:
        context(doc, False)
        mistake(doc, broken)

    return build


RANDOM = {"inputTokens": {"mean": 64}, "outputTokens": {"mean": 8}}
CHATS = {"conversations": 4, "turns": 2}


TRACE = {"file": "traces/small-mooncake.jsonl"}
TRACE_CM = {"configMap": {"name": "small-mooncake"}}


def _random(input_tokens: dict[str, Any]) -> dict[str, Any]:
    return {"random": {"inputTokens": input_tokens, "outputTokens": {"mean": 8}}}


@dataclass(frozen=True)
class Case:
    id: str
    build: Build
    field: str  # the path the error must be reported at
    also: tuple[str, ...] = ()


CASES: list[Case] = [
    Case("wrong-api-version", _value("apiVersion", "kvbench.io/v1", API_VERSION), "apiVersion"),
    Case("wrong-kind", _value("kind", "Experiment", "BenchmarkExperiment"), "kind"),
    Case("bad-name", _value("metadata.name", "Prefix_Cache", "prefix-cache"), "metadata.name"),
    Case("missing-model", _missing("spec.engine.model"), "spec.engine.model", ("Field required",)),
    Case(
        "misspelled-key",
        _key("spec.engine", "maxModelLength", "maxModelLen", 4096),
        "spec.engine.maxModelLength",
        ("Extra inputs",),
    ),
    Case(
        "gpu-util-above-1",
        _value("spec.engine.gpuMemoryUtilization", 1.5, 1.0),
        "spec.engine.gpuMemoryUtilization",
    ),
    Case(
        "kv-bytes-not-quantity",
        _value("spec.engine.kvCacheMemoryBytes", "one gig", "1Gi"),
        "spec.engine.kvCacheMemoryBytes",
        ("quantity",),
    ),
    Case(
        "kv-dtype-unknown",
        _value("spec.engine.kvCacheDtype", "int4", "fp8"),
        "spec.engine.kvCacheDtype",
    ),
    Case("dtype-unknown", _value("spec.engine.dtype", "int4", "float32"), "spec.engine.dtype"),
    Case("block-size-odd", _value("spec.engine.blockSize", 24, 32), "spec.engine.blockSize"),
    Case("no-workers", _value("spec.workers", [], BASE["spec"]["workers"][:1]), "spec.workers"),
    Case("zero-replicas", _value("spec.workers.0.replicas", 0, 1), "spec.workers[0].replicas"),
    Case(
        "pool-name-twice",
        _value("spec.workers.1.name", "gpu24", "gpu8b"),
        "spec.workers",
        ("gpu24 repeated", "unique"),
    ),
    Case(
        "gpu-quantity-bad",
        _value(
            "spec.workers.0.resources.limits", {"nvidia.com/gpu": "lots"}, {"nvidia.com/gpu": 2}
        ),
        "spec.workers[0].resources.limits.nvidia.com/gpu",
        ("quantity",),
    ),
    Case(
        "toleration-effect",
        _value(
            "spec.workers.0.tolerations",
            [{"key": "a", "effect": "Never"}],
            [{"key": "a", "effect": "NoSchedule"}],
        ),
        "spec.workers[0].tolerations[0].effect",
    ),
    Case(
        "arm-two-kinds",
        _value(
            "spec.routing.0",
            {"name": "x", "service": {}, "router": {}},
            {"name": "x", "service": {}},
        ),
        "spec.routing[0]",
        ("exactly one", "found 2"),
    ),
    Case(
        "arm-no-kind",
        _value("spec.routing.0", {"name": "x"}, {"name": "x", "service": {}}),
        "spec.routing[0]",
        ("exactly one", "found none"),
    ),
    Case(
        "router-policy",
        _value(
            "spec.routing.0",
            {"name": "r", "router": {"policy": "smart"}},
            {"name": "r", "router": {"policy": "round_robin"}},
        ),
        "spec.routing[0].router.policy",
    ),
    Case(
        "router-needs-text",
        _with(
            _value("spec.routing.0", None, {"name": "r", "router": {"policy": "cache_aware"}}),
            _value("spec.workload.promptFormat", "token-ids", "text"),
        ),
        "spec.routing[r].router.policy",
        ("cache_aware", "workload.promptFormat"),
    ),
    Case(
        "router-kv-event-flag",
        _value(
            "spec.routing.0",
            {
                "name": "r",
                "router": {"policy": "round_robin", "extraArgs": ["--kv-event-model", "m"]},
            },
            {
                "name": "r",
                "router": {"policy": "round_robin", "extraArgs": ["--cache-threshold", "0.5"]},
            },
        ),
        "spec.routing[0].router.extraArgs",
        ("--kv-event-model", "kvbench sets it"),
    ),
    Case(
        "external-no-selector",
        _value(
            "spec.routing.0",
            {"name": "e", "external": {"url": "http://x"}},
            {"name": "e", "external": {"url": "http://x", "podSelector": {"a": "b"}}},
        ),
        "spec.routing[0].external.podSelector",
        ("Field required",),
    ),
    Case(
        "external-bad-url",
        _with(
            _value("spec.routing.0", None, {"name": "e", "external": {"podSelector": {"a": "b"}}}),
            _value("spec.routing.0.external.url", "x", "http://x"),
        ),
        "spec.routing[0].external.url",
    ),
    Case(
        "affinity-needs-prefixes",
        _with(
            _value("spec.routing", None, [{"name": "a", "prefixAffinity": {}}]),
            _value("spec.workload", {"random": RANDOM}, BASE["spec"]["workload"]),
        ),
        "spec.routing[a].prefixAffinity",
        ("workload.sharedPrefix",),
    ),
    Case(
        "two-workloads",
        _value(
            "spec.workload",
            {"sharedPrefix": BASE["spec"]["workload"]["sharedPrefix"], "random": RANDOM},
            {"random": RANDOM},
        ),
        "spec.workload",
        ("exactly one", "found 2"),
    ),
    Case(
        "prefixes-zero",
        _value("spec.workload.sharedPrefix.prefixes", [0, 2], [1, 2]),
        "spec.workload.sharedPrefix.prefixes[0]",
    ),
    Case(
        "prefixes-repeated",
        _value("spec.workload.sharedPrefix.prefixes", [2, 2], [2, 3]),
        "spec.workload.sharedPrefix.prefixes",
        ("twice",),
    ),
    Case(
        "session-affinity-needs-conversations",
        _with(
            _value("spec.routing", None, [{"name": "s", "sessionAffinity": {}}]),
            _value(
                "spec.workload",
                BASE["spec"]["workload"],
                {"promptFormat": "text", "conversation": CHATS},
            ),
        ),
        "spec.routing[s].sessionAffinity",
        ("workload.conversation",),
    ),
    Case(
        "conversation-as-token-ids",
        _value(
            "spec.workload",
            {"promptFormat": "token-ids", "conversation": CHATS},
            {"promptFormat": "text", "conversation": CHATS},
        ),
        "spec.workload.promptFormat",
        ("chat messages", "text"),
    ),
    Case(
        "conversation-turns-zero",
        _value(
            "spec.workload",
            {"promptFormat": "text", "conversation": CHATS | {"turns": 0}},
            {"promptFormat": "text", "conversation": CHATS},
        ),
        "spec.workload.conversation.turns",
    ),
    Case(
        "slo-without-objectives",
        _value("spec.slo", {}, {"ttft": "500ms"}),
        "spec.slo",
        ("at least one of ttft, tpot, itl, e2e",),
    ),
    Case(
        "slo-not-a-duration",
        _value("spec.slo", {"tpot": "fast"}, {"tpot": "50ms"}),
        "spec.slo.tpot",
    ),
    Case(
        "trace-without-source",
        _value("spec.workload", {"trace": {}}, {"trace": TRACE}),
        "spec.workload.trace",
        ("set file (kvbench run) or configMap (a cluster), exactly one",),
    ),
    Case(
        "trace-file-and-configmap",
        _value("spec.workload", {"trace": {**TRACE, "configMap": {"name": "t"}}}, {"trace": TRACE}),
        "spec.workload.trace",
        ("exactly one",),
    ),
    Case(
        "trace-configmap-name",
        _value(
            "spec.workload", {"trace": {"configMap": {"name": "My_Trace"}}}, {"trace": TRACE_CM}
        ),
        "spec.workload.trace.configMap.name",
    ),
    Case(
        "trace-format",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.workload.trace.format", "sharegpt", "mooncake"),
        ),
        "spec.workload.trace.format",
    ),
    Case(
        "trace-block-tokens-zero",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.workload.trace.blockTokens", 0, 16),
        ),
        "spec.workload.trace.blockTokens",
    ),
    Case(
        "trace-timing",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.workload.trace.timing", "poisson", "closed"),
        ),
        "spec.workload.trace.timing",
    ),
    Case(
        "trace-speedup-zero",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.workload.trace.speedup", 0, 2.5),
        ),
        "spec.workload.trace.speedup",
    ),
    Case(
        "trace-max-rows-zero",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.workload.trace.maxRows", 0, 50),
        ),
        "spec.workload.trace.maxRows",
    ),
    Case(
        "trace-with-request-rates",
        _with(
            _value("spec.workload", None, {"trace": TRACE}),
            _value("spec.load.requestRates", [1.0], None),
        ),
        "spec.load.requestRates",
        ("trace replay has its own timing",),
    ),
    Case(
        "affinity-on-a-trace-is-fine-on-random-not",
        _with(
            _value("spec.routing", None, [{"name": "a", "prefixAffinity": {}}]),
            _value("spec.workload", {"random": RANDOM}, {"trace": TRACE}),
        ),
        "spec.routing[a].prefixAffinity",
        ("workload.sharedPrefix or workload.trace",),
    ),
    Case(
        "zipf-exponent-zero",
        _value("spec.workload.sharedPrefix.popularity", {"zipf": {"s": 0}}, {"zipf": {"s": 1}}),
        "spec.workload.sharedPrefix.popularity.zipf.s",
    ),
    Case(
        "zipf-and-weights",
        _value(
            "spec.workload.sharedPrefix.popularity",
            {"zipf": {"s": 1}, "weights": [1, 2]},
            {"zipf": {"s": 1}},
        ),
        "spec.workload.sharedPrefix.popularity",
        ("not both",),
    ),
    Case(
        "weights-for-another-prefix-count",
        _with(
            _value("spec.workload.sharedPrefix.prefixes", None, [3]),
            _value(
                "spec.workload.sharedPrefix.popularity", {"weights": [3, 1]}, {"weights": [3, 1, 1]}
            ),
        ),
        "spec.workload.sharedPrefix",
        ("2 entries", "[2]", "[3]"),
    ),
    Case(
        "weights-all-zero",
        _with(
            _value("spec.workload.sharedPrefix.prefixes", None, [2]),
            _value(
                "spec.workload.sharedPrefix.popularity", {"weights": [0, 0]}, {"weights": [0, 1]}
            ),
        ),
        "spec.workload.sharedPrefix.popularity",
        ("all zero",),
    ),
    Case(
        # 339 suffix and 64 output tokens: a 3,693-token prefix fills maxModelLen 4096 exactly
        "request-too-long",
        _value("spec.workload.sharedPrefix.prefixTokens", 3694, 3693),
        "spec.workload",
        ("4097 tokens", "maxModelLen 4096"),
    ),
    Case(
        "length-min-above-max",
        _value(
            "spec.workload",
            _random({"mean": 64, "distribution": "uniform", "min": 100, "max": 10}),
            _random({"mean": 64, "distribution": "uniform", "min": 10, "max": 100}),
        ),
        "spec.workload.random.inputTokens",
        ("min (100) is above max (10)",),
    ),
    Case(
        "normal-needs-stddev",
        _value(
            "spec.workload",
            _random({"mean": 64, "distribution": "normal", "max": 100}),
            _random({"mean": 64, "distribution": "normal", "max": 100, "stddev": 8}),
        ),
        "spec.workload.random.inputTokens",
        ("stddev",),
    ),
    Case("concurrency-zero", _value("spec.load.concurrency", [0], [1]), "spec.load.concurrency[0]"),
    Case(
        "concurrency-repeated",
        _value("spec.load.concurrency", [4, 4], [4, 8]),
        "spec.load.concurrency",
        ("twice",),
    ),
    Case(
        "rate-negative",
        _value("spec.load.requestRates", [-1.0], [1.0]),
        "spec.load.requestRates[0]",
    ),
    Case("trials-zero", _value("spec.load.trials", 0, 1), "spec.load.trials"),
    Case(
        "connection-unknown",
        _value("spec.load.connection", "reuse", "keep-alive"),
        "spec.load.connection",
    ),
    Case("freshness-unknown", _value("spec.freshness", "reboot", "none"), "spec.freshness"),
    Case(
        "reset-cache-without-dev-mode",
        _with(
            _value("spec.freshness", None, "reset-cache"),
            _value("spec.engine.env", [], [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]),
        ),
        "spec.freshness",
        ("reset-cache", "VLLM_SERVER_DEV_MODE"),
    ),
    Case(
        "prometheus-without-url",
        _value(
            "spec.metrics",
            {"source": "prometheus"},
            {"source": "prometheus", "prometheusUrl": "http://prometheus:9090"},
        ),
        "spec.metrics",
        ("prometheusUrl",),
    ),
    Case(
        "timeout-not-duration",
        _value("spec.timeouts", {"run": "an hour"}, {"run": "1h"}),
        "spec.timeouts.run",
        ("duration",),
    ),
    Case(
        "variant-name-twice",
        _value("spec.variants", [{"name": "a"}, {"name": "a"}], [{"name": "a"}, {"name": "b"}]),
        "spec.variants",
        ("a repeated", "unique"),
    ),
    Case(
        "variant-unknown-flag",
        _with(
            _value("spec.variants", None, [{"name": "a", "engine": {}}]),
            _key("spec.variants.0.engine", "chunk", "maxNumBatchedTokens", 8192),
        ),
        "spec.variants[0].engine.chunk",
        ("Extra inputs",),
    ),
    Case(
        "variant-breaks-engine",
        _with(
            _value("spec.variants", None, [{"name": "nochunk", "engine": {}}]),
            _value(
                "spec.variants.0.engine",
                {"enableChunkedPrefill": False, "maxNumBatchedTokens": 512},
                {"enableChunkedPrefill": False, "maxNumBatchedTokens": 4096},
            ),
        ),
        "spec.variants[0] (nochunk).engine",
        ("maxNumBatchedTokens (512) is below maxModelLen (4096)",),
    ),
    Case(
        "interference-concurrency",
        _with(
            _value("spec.workload", None, {"interference": {}}),
            _value("spec.load.concurrency", [4, 8], [1]),
        ),
        "spec.load.concurrency",
        ("interference",),
    ),
    Case(
        "env-value-and-source",
        _value(
            "spec.engine.env",
            [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ),
        "spec.engine.env[0]",
        ("not both",),
    ),
    Case(
        "toleration-no-key-equal",
        _value(
            "spec.workers.0.tolerations",
            [{"operator": "Equal", "value": "x"}],
            [{"operator": "Exists"}],
        ),
        "spec.workers[0].tolerations[0]",
        ("operator Exists",),
    ),
    Case(
        "toleration-seconds-not-no-execute",
        _value(
            "spec.workers.0.tolerations",
            [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}],
            [{"key": "a", "effect": "NoExecute", "tolerationSeconds": 5}],
        ),
        "spec.workers[0].tolerations[0]",
        ("NoExecute",),
    ),
    Case(
        "gpu-request-without-limit",
        _value(
            "spec.workers.0.resources",
            {"requests": {"nvidia.com/gpu": 1}},
            {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}},
        ),
        "spec.workers[0].resources",
        ("needs a limit",),
    ),
    Case(
        "gpu-request-below-limit",
        _value(
            "spec.workers.0.resources",
            {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
            {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}},
        ),
        "spec.workers[0].resources",
        ("request is its limit",),
    ),
    Case(
        "hf-home-with-model-cache",
        _with(
            _value("spec.engine.modelCache", None, {"hostPath": "/models"}),
            _value("spec.engine.env", [{"name": "HF_HOME", "value": "/x"}], []),
        ),
        "spec.engine",
        ("HF_HOME",),
    ),
    Case(
        "extra-arg-dollar-dollar",
        _value("spec.engine.extraArgs", ["a$$b"], ["a$b"]),
        "spec.engine.extraArgs[0]",
        ("variable references",),
    ),
    Case(
        "extra-args-kv-events",
        _value("spec.engine.extraArgs", ["--kv-events-config={}"], ["--enable-lora"]),
        "spec.engine.extraArgs",
        ("kvbench sets",),
    ),
    Case(
        "dev-mode-true",
        _value(
            "spec.engine.env",
            [{"name": "VLLM_SERVER_DEV_MODE", "value": "true"}],
            [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}],
        ),
        "spec.engine.env",
        ("'0' or '1'",),
    ),
    Case("replicas-bool", _value("spec.workers.0.replicas", True, 1), "spec.workers[0].replicas"),
    Case("seed-string", _value("spec.load.seed", "7", 7), "spec.load.seed"),
    Case(
        "time-scale-infinite",
        _value("spec.simulator", {"timeScale": float("inf")}, {"timeScale": 0.5}),
        "spec.simulator.timeScale",
    ),
    Case(
        "rate-nan",
        _value("spec.load.requestRates", [float("nan")], [1.0]),
        "spec.load.requestRates[0]",
    ),
    Case(
        "timeout-nan",
        _value("spec.timeouts", {"run": float("nan")}, {"run": 60}),
        "spec.timeouts.run",
        ("30 days",),
    ),
    Case(
        "pod-selector-label-value",
        _value(
            "spec.routing.0",
            {"name": "e", "external": {"url": "http://x", "podSelector": {"app": "a b"}}},
            {"name": "e", "external": {"url": "http://x", "podSelector": {"app": "a-b"}}},
        ),
        "spec.routing[0].external.podSelector.app",
        ("label value",),
    ),
    Case(
        "model-cache-two-sources",
        _value(
            "spec.engine.modelCache",
            {"hostPath": "/models", "persistentVolumeClaim": "pvc"},
            {"hostPath": "/models"},
        ),
        "spec.engine.modelCache",
        ("exactly one",),
    ),
]


def _document(case: Case, broken: bool) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    case.build(document, broken)
    return document


def _locations(message: str) -> list[str]:
    """Where each error of a SpecError's message is reported: a field error's line is
    `  <path>: <what>`, a cross-field check's `  spec: <path> <what>` (read as `spec.<path>`)."""
    lines = [line.strip() for line in message.splitlines()[1:] if line.startswith("  ")]
    return [
        line.replace("spec: ", "spec.", 1) if line.startswith("spec: ") else line for line in lines
    ]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_spec_is_rejected_at_the_field_it_broke(case: Case) -> None:
    parse_experiment(_document(case, broken=False), "fixed.yaml")  # the mistake is all
    with pytest.raises(SpecError) as caught:
        parse_experiment(_document(case, broken=True), "case.yaml")
    message = str(caught.value)
    assert message.startswith("case.yaml: "), message
    at_field = [
        line for line in _locations(message) if re.match(re.escape(case.field) + r"[: ]", line)
    ]
    assert at_field, f"no error at {case.field!r} in:\n{message}"
    for text in case.also:
        assert text in message, f"{text!r} not in:\n{message}"


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
