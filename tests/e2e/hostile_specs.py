"""Hostile and malformed BenchmarkExperiments, each with the field its refusal must name and
where it is refused: by the API server's CRD schema at admission (`admission`), or by the
operator, which fails it with a condition before making any child (`operator`: what a schema
cannot say, such as cross-field rules, map keys, reserved flags and variables, and the CEL
rules a 1.20 server drops).

Each case is a small valid experiment (`base_document`) with one hostile change, so its
refusal is the change's and no other's (tests/unit/api/test_hostile_table.py checks that
offline, against the models and the CRD's schema)."""

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from kvbench.testing.experiments import CPU_NODE_SHARE

ROOT = Path(__file__).resolve().parents[2]
GPU = {"nvidia.com/gpu.present": "true"}
Document = dict[str, Any]
Build = Callable[[Document], None]


def base_document(name: str) -> Document:
    """A small experiment the test cluster runs in about a minute: two simulated workers on
    GPU nodes, one point, one trial."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["metadata"]["name"] = name
    spec = document["spec"]
    spec["workers"] = [
        {"name": "gpu", "replicas": 2, "nodeSelector": dict(GPU),
         "simulation": {"profile": "qwen3-0.6b-24gb"}},
    ]  # fmt: skip
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["load"].update(concurrency=[8], trials=1)
    spec["simulator"] = {"onCluster": True}
    spec["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    return document


def _set(path: str, value: Any) -> Build:
    """`path` (dotted, list indices as numbers) set to `value`."""

    def build(document: Document) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = copy.deepcopy(value)
        else:
            node[last] = copy.deepcopy(value)

    return build


def _all(*builds: Build) -> Build:
    def build(document: Document) -> None:
        for one in builds:
            one(document)

    return build


def _drop(key: str) -> Build:
    return lambda document: document.pop(key)


def _env(*variables: dict[str, Any]) -> Build:
    return _set("spec.engine.env", list(variables))


def _args(*args: str) -> Build:
    return _set("spec.engine.extraArgs", list(args))


def _router(**router: Any) -> Build:
    arm = {"policy": "round_robin", "resources": CPU_NODE_SHARE, **router}
    return _set("spec.routing", [{"name": "r", "router": arm}])


def _node_affinity(expression: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": [expression]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}  # fmt: skip


SECRET = {"secretKeyRef": {"name": "s", "key": "k"}}
LITERAL_ARGS = [
    "--x-literal",
    "; touch /tmp/kvbench-hostile #",
    "a\nb c",
    "`id`",
    "|| true",
    "&& echo hi",
    "'\"",
    "$HOME",
    "> /dev/null",
    "*",
    "\\",
]
"""Shell metacharacters and a newline: valid extraArgs, which must reach the engine as these
exact argv elements (no shell splits or runs them)."""


@dataclass(frozen=True)
class Hostile:
    id: str
    build: Build
    field: str
    """Where the refusal is reported, as the models write it (`spec.workers[0].replicas`)."""
    stage: Literal["admission", "operator"]
    also: str = ""
    """More text the refusal must hold."""

    def document(self) -> Document:
        document = base_document(f"h-{self.id}"[:40].rstrip("-"))
        self.build(document)
        return document


def names_field(message: str, field: str) -> bool:
    """Whether `message` reports a problem at `field`. The API server drops list indices
    (`spec.workers.replicas`) and the models write a spec-wide rule's path after `spec: `,
    so both sides are compared without indices, with `spec: x` read as `spec.x`, in lower
    case."""

    def plain(text: str) -> str:
        text = re.sub(r"\[[^\]\s]*\]|\.[0-9]+\b", "", text.replace("spec: ", "spec."))
        return text.lower()

    return plain(field) in plain(message)


WRONG_TYPES = [
    Hostile("replicas-string", _set("spec.workers.0.replicas", "2"),
            "spec.workers[0].replicas", "admission"),
    Hostile("port-bool", _set("spec.engine.port", True), "spec.engine.port", "admission"),
    Hostile("concurrency-scalar", _set("spec.load.concurrency", 8), "spec.load.concurrency",
            "admission"),
    Hostile("workers-object", _set("spec.workers", {"name": "gpu", "replicas": 2}),
            "spec.workers", "admission"),
    Hostile("seed-float", _set("spec.load.seed", 1.5), "spec.load.seed", "admission"),
    Hostile("env-value-number", _env({"name": "A", "value": 1}), "spec.engine.env[0].value",
            "admission"),
    Hostile("model-list", _set("spec.engine.model", ["m"]), "spec.engine.model", "admission"),
    Hostile("keep-workers-string", _set("spec.cleanup.keepWorkers", "yes"),
            "spec.cleanup.keepWorkers", "admission"),
    Hostile("no-spec", _drop("spec"), "spec", "admission", "required"),
]  # fmt: skip

COUNTS = [
    Hostile("replicas-negative", _set("spec.workers.0.replicas", -1),
            "spec.workers[0].replicas", "admission"),
    Hostile("replicas-1e9", _set("spec.workers.0.replicas", 10**9),
            "spec.workers[0].replicas", "admission"),
    Hostile("concurrency-1e9", _set("spec.load.concurrency", [10**9]),
            "spec.load.concurrency[0]", "admission"),
    Hostile("trials-1e9", _set("spec.load.trials", 10**9), "spec.load.trials", "admission"),
    Hostile("trials-negative", _set("spec.load.trials", -3), "spec.load.trials", "admission"),
    Hostile("seed-beyond-int64", _set("spec.load.seed", 10**30), "spec.load.seed",
            "admission"),
    Hostile("retries-1e6", _set("spec.execution.retries", 10**6), "spec.execution.retries",
            "admission"),
    Hostile("prefix-tokens-1e9", _set("spec.workload.sharedPrefix.prefixTokens", 10**9),
            "spec.workload.sharedPrefix.prefixTokens", "admission"),
    Hostile("rate-negative", _set("spec.load.requestRates", [-1.0]),
            "spec.load.requestRates[0]", "admission"),
    Hostile("pool-twice", _set("spec.workers", [{"name": "gpu", "replicas": 1}] * 2),
            "spec.workers", "admission"),
    Hostile("workers-400", _set("spec.workers", [
        {"name": "a", "replicas": 200, "nodeSelector": GPU},
        {"name": "b", "replicas": 200, "nodeSelector": GPU}]),
            "spec.workers", "operator", "400 replicas"),
    Hostile("runs-409600", _all(
        _set("spec.workload.sharedPrefix.prefixes", list(range(1, 65))),
        _set("spec.load.concurrency", list(range(1, 65))),
        _set("spec.load.trials", 100)), "spec.load", "operator", "409600 runs"),
    Hostile("requests-2e6", _set("spec.workload.sharedPrefix.requestsPerPrefix", 10**6),
            "spec.workload", "operator", "2000000 requests"),
    Hostile("run-timeout-11000-years", _set("spec.timeouts.run", "99999999h"),
            "spec.timeouts.run", "operator", "30 days"),
    Hostile("cpu-1e999", _set("spec.workers.0.resources", {"limits": {"cpu": "1e999"}}),
            "spec.workers[0].resources.limits.cpu", "operator", "2^63"),
    Hostile("kv-bytes-1e400", _set("spec.engine.kvCacheMemoryBytes", "1e400"),
            "spec.engine.kvCacheMemoryBytes", "operator"),
]  # fmt: skip

ENUMS = [
    Hostile("freshness-reboot", _set("spec.freshness", "reboot"), "spec.freshness",
            "admission"),
    Hostile("kv-dtype-int3", _set("spec.engine.kvCacheDtype", "int3"),
            "spec.engine.kvCacheDtype", "admission"),
    Hostile("router-policy-smartest", _router(policy="smartest"),
            "spec.routing[0].router.policy", "admission"),
    Hostile("toleration-effect-never", _set("spec.workers.0.tolerations", [
        {"key": "a", "effect": "Never"}]), "spec.workers[0].tolerations[0].effect",
            "admission"),
    Hostile("connection-udp", _set("spec.load.connection", "udp"), "spec.load.connection",
            "admission"),
    Hostile("router-sglang", _router(implementation="sglang-router"),
            "spec.routing[0] (r).router.implementation", "operator"),
]  # fmt: skip

LENGTHS = [
    Hostile("name-10000", _set("metadata.name", "a" * 10_000), "metadata.name", "admission"),
    Hostile("model-10000", _set("spec.engine.model", "m" * 10_000), "spec.engine.model",
            "admission"),
    Hostile("env-value-10000", _env({"name": "A", "value": "v" * 10_000}),
            "spec.engine.env[0].value", "admission"),
    Hostile("extra-args-300", _args(*["--x"] * 300), "spec.engine.extraArgs", "admission"),
    Hostile("extra-arg-10000", _args("y" * 10_000), "spec.engine.extraArgs[0]", "admission"),
    Hostile("node-selector-key-10000", _set("spec.workers.0.nodeSelector", {"k" * 10_000: "v"}),
            "spec.workers[0].nodeSelector", "operator"),
    Hostile("spec-100k", _args(*["y" * 3500] * 30), "spec", "operator", "bytes as JSON"),
    Hostile("spec-900k", _args(*["y" * 3600] * 250), "spec", "operator", "bytes as JSON"),
]  # fmt: skip

NAMES = [
    Hostile("name-63", _set("metadata.name", "n" * 63), "metadata.name", "admission"),
    Hostile("name-41", _set("metadata.name", "n" * 41), "metadata.name", "admission"),
    Hostile("name-digit-first", _set("metadata.name", "1-experiment"), "metadata.name",
            "admission"),
    Hostile("pool-name-40", _set("spec.workers.0.name", "p" * 40), "spec.workers[0].name",
            "admission"),
    Hostile("arm-name-upper", _set("spec.routing.0.name", "Service"), "spec.routing[0].name",
            "admission"),
]  # fmt: skip

ARGS = [
    Hostile("extra-arg-nul", _args("a\x00b"), "spec.engine.extraArgs[0]", "admission"),
    Hostile("extra-arg-kube-variable", _args("--served-model-name", "$(HF_TOKEN)"),
            "spec.engine.extraArgs[1]", "admission"),
    Hostile("model-kube-variable", _set("spec.engine.model", "$(POD_IP)"),
            "spec.engine.model", "admission"),
    Hostile("extra-args-host", _args("--host", "0.0.0.0"), "spec.engine.extraArgs",
            "operator", "--host"),
    Hostile("extra-args-port-equals", _args("--port=9000"), "spec.engine.extraArgs",
            "operator", "--port"),
    Hostile("extra-args-host-prefix", _args("--ho", "10.0.0.1"), "spec.engine.extraArgs",
            "operator", "--ho"),
    Hostile("extra-args-typed-flag", _args("--max-model-len", "64"), "spec.engine.extraArgs",
            "operator", "engine.maxModelLen"),
    Hostile("variant-args-host", _set("spec.variants", [
        {"name": "v", "engine": {"extraArgs": ["--host=0.0.0.0"]}}]),
            "spec.variants[0].engine.extraArgs", "operator", "--host"),
    Hostile("router-args-workers", _router(extraArgs=["--worker-urls", "http://10.9.9.9:1"]),
            "spec.routing[0].router.extraArgs", "operator", "--worker-urls"),
]  # fmt: skip

ENV = [
    Hostile("env-pod-ip", _env({"name": "POD_IP", "value": "0.0.0.0"}), "spec.engine.env",
            "operator", "POD_IP"),
    Hostile("env-pod-name-secret", _env({"name": "POD_NAME", "valueFrom": SECRET}),
            "spec.engine.env", "operator", "POD_NAME"),
    Hostile("env-kvbench-image", _env({"name": "KVBENCH_IMAGE", "value": "evil/img"}),
            "spec.engine.env", "operator", "KVBENCH_"),
    Hostile("env-home", _env({"name": "HOME", "value": "/"}), "spec.engine.env", "operator",
            "HOME"),
    Hostile("env-dev-mode-secret", _env({"name": "VLLM_SERVER_DEV_MODE", "valueFrom": SECRET}),
            "spec.engine.env", "operator", "VLLM_SERVER_DEV_MODE"),
    Hostile("env-dev-mode-yes", _env({"name": "VLLM_SERVER_DEV_MODE", "value": "yes"}),
            "spec.engine.env", "operator", "VLLM_SERVER_DEV_MODE"),
    Hostile("env-twice", _env({"name": "A", "value": "1"}, {"name": "A", "value": "2"}),
            "spec.engine.env", "operator", "twice"),
    Hostile("variant-env-pod-ip", _set("spec.variants", [
        {"name": "v", "engine": {"env": [{"name": "POD_IP", "value": "1.2.3.4"}]}}]),
            "spec.variants[0].engine.env", "operator", "POD_IP"),
    Hostile("env-hf-token-and-secret", _all(
        _set("spec.engine.hubTokenSecret", {"name": "hf"}),
        _env({"name": "HF_TOKEN", "value": "hf_x"})), "spec.engine", "operator", "HF_TOKEN"),
]  # fmt: skip

IMAGES = [
    Hostile("image-short-digest", _set("spec.engine.image", "ghcr.io/x/y@sha256:short"),
            "spec.engine.image", "admission"),
    Hostile("image-uppercase", _set("spec.engine.image", "VLLM/VLLM-OPENAI:V1"),
            "spec.engine.image", "admission"),
    Hostile("image-spaces", _set("spec.engine.image", "vllm/vllm openai"),
            "spec.engine.image", "admission"),
    Hostile("image-300", _set("spec.engine.image", "a" * 300), "spec.engine.image",
            "admission"),
    Hostile("image-two-tags", _set("spec.engine.image", "vllm/vllm-openai:v1:v2"),
            "spec.engine.image", "admission"),
    Hostile("simulator-image-newline", _set("spec.simulator.image", "kvbench\n:latest"),
            "spec.simulator.image", "admission"),
    Hostile("router-image-empty", _router(image=""), "spec.routing[0].router.image",
            "admission"),
]  # fmt: skip

KUBE_SHAPES = [
    Hostile("secret-name-invalid", _set("spec.engine.hubTokenSecret", {"name": "Bad_Name"}),
            "spec.engine.hubTokenSecret.name", "admission"),
    Hostile("cpu-negative", _set("spec.workers.0.resources", {"limits": {"cpu": "-1"}}),
            "spec.workers[0].resources.limits.cpu", "admission"),
    Hostile("node-selector-value-space", _set("spec.workers.0.nodeSelector",
                                              {"kvbench.io/gpu": "x y"}),
            "spec.workers[0].nodeSelector", "admission"),
    Hostile("external-url-space", _set("spec.routing", [
        {"name": "e", "external": {"url": "http://a b", "podSelector": {"a": "b"}}}]),
            "spec.routing[0].external.url", "admission"),
    Hostile("run-timeout-words", _set("spec.timeouts.run", "an hour"), "spec.timeouts.run",
            "admission"),
    Hostile("affinity-misspelled", _set("spec.workers.0.affinity", {"nodeAfinity": {}}),
            "spec.workers[0].affinity", "operator", "nodeAfinity"),
    Hostile("affinity-operator-near", _set("spec.workers.0.affinity", _node_affinity(
        {"key": "zone", "operator": "Near", "values": ["a"]})),
            "spec.workers[0].affinity", "operator", "operator"),
    Hostile("toleration-exists-value", _set("spec.workers.0.tolerations", [
        {"key": "a", "operator": "Exists", "value": "x"}]),
            "spec.workers[0].tolerations[0]", "operator", "Exists"),
    Hostile("gpu-half", _set("spec.workers.0.resources", {"limits": {"nvidia.com/gpu": "0.5"}}),
            "spec.workers[0].resources", "operator", "whole number"),
    Hostile("cpu-request-above-limit", _set("spec.workers.0.resources", {
        "requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
            "spec.workers[0].resources", "operator", "above its limit"),
    Hostile("resource-unqualified", _set("spec.workers.0.resources", {"limits": {"gpu": 1}}),
            "spec.workers[0].resources.limits", "operator", "qualified name"),
    Hostile("model-cache-on-tmp", _set("spec.engine.modelCache", {
        "mountPath": "/tmp", "emptyDirSizeLimit": "1Gi"}),
            "spec.engine.modelCache.mountPath", "operator", "/tmp"),
    Hostile("host-path-dot-dot", _set("spec.engine.modelCache", {"hostPath": "/m/../etc"}),
            "spec.engine.modelCache.hostPath", "operator", ".."),
    Hostile("affinity-arm-without-prefixes", _all(
        _set("spec.routing", [{"name": "a", "prefixAffinity": {}}]),
        _set("spec.workload", {"random": {"inputTokens": {"mean": 64},
                                          "outputTokens": {"mean": 8}}})),
            "spec.routing[a].prefixAffinity", "operator", "sharedPrefix"),
    Hostile("interference-concurrency", _all(
        _set("spec.workload", {"interference": {}}), _set("spec.load.concurrency", [4])),
            "spec.load.concurrency", "operator", "interference"),
]  # fmt: skip

CASES: list[Hostile] = [
    *WRONG_TYPES,
    *COUNTS,
    *ENUMS,
    *LENGTHS,
    *NAMES,
    *ARGS,
    *ENV,
    *IMAGES,
    *KUBE_SHAPES,
]


def alias_bomb(name: str, levels: int = 9) -> str:
    """A billion laughs (10^levels strings from a few hundred bytes) beside a valid spec."""
    lines = ['  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    return yaml.safe_dump(base_document(name), sort_keys=False) + "bomb:\n" + "\n".join(lines)
