"""Property-based fuzzing of the spec: the examples, mutated (values of other types, keys dropped
and added, extreme numbers, long and odd strings, unicode), never make `parse_experiment` raise
anything but a SpecError naming a field; and whatever it accepts renders to manifests current
Kubernetes accepts, with names and labels within its limits, is accepted back from the form the
results store keeps, and was not refused by the CRD's own schema (admission never stricter than
the operator)."""

import copy
import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.api import API_VERSION, KIND, BenchmarkExperiment, SpecError, parse_experiment
from kvbench.api.crd import crd_manifest
from kvbench.api.workload import TraceInfo
from kvbench.kube.manifests import (
    ExperimentRef,
    load_job,
    load_objects,
    router_objects,
    worker_objects,
)
from kvbench.kube.results import result_configmap_names
from kvbench.kube.validation import validate_manifest
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames
from kvbench.runner.cluster.base import UrlEndpoint
from kvbench.runner.mapping import build_run_config
from kvbench.runner.stores.directory import resolved_experiment

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
EXAMPLES_RUN = 400
TRACE = TraceInfo(
    source="trace", sha256="0" * 64, rows=1000, input_tokens=2000, output_tokens=50, seconds=60
)
"""What a trace workload's plan is made with (the trace itself is not read here)."""

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_ROOTS = ("(document)", "apiVersion", "kind", "metadata", "spec", "status")


def _schema_keys(node: dict[str, Any]) -> set[str]:
    keys = set(node.get("properties", {}))
    for sub in node.get("properties", {}).values():
        keys |= _schema_keys(sub)
    for part in ("items", "additionalProperties"):
        if isinstance(node.get(part), dict):
            keys |= _schema_keys(node[part])
    return keys


KNOWN_KEYS = sorted(
    _schema_keys(crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
)
"""Every field name of the CRD: added keys that the models know, in places they do not."""

ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\nb",
    "\t",
    "$(HF_TOKEN)",
    "$$",
    "; rm -rf / #",
    "--host",
    "--port=1",
    "--max-model-len",
    "1Gi",
    "-1",
    "1e400",
    "1e4000000",
    "10m",
    "99999999999999999999h",
    "nan",
    "Ω≈ç√",
    "🙂",
    "POD_IP",
    "KVBENCH_IMAGE",
    "VLLM_SERVER_DEV_MODE",
    "UPPER",
    "ghcr.io/x/y@sha256:short",
    "ghcr.io/x/y:tag:tag",
    "a" * 40,
    "a" * 64,
    "a" * 300,
    "x" * 10_000,
    "/tmp",
    "/a/../b",
    "nvidia.com/gpu",
    "a b",
]
EXTREME_INTS = [0, -1, 1, 2, 16, 63, 64, 256, 257, 4097, 2**31, 2**53 + 1, 2**63, 10**30]
_extreme_ints = st.sampled_from(EXTREME_INTS) | st.just(5000).map(lambda digits: 10**digits)
"""With an int too long for str() (Python refuses over 4,300 digits): YAML can carry it."""

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    _extreme_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(ODD_TEXT),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=8,
)


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in the document (not the root itself)."""
    if not isinstance(node, dict | list):
        return []
    places: list[tuple[Any, ...]] = []
    for key, value in node.items() if isinstance(node, dict) else enumerate(node):
        places.append((*path, key))
        places += _places(value, (*path, key))
    return places


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _nudged(value: Any) -> st.SearchStrategy[Any]:
    """A value near `value`, often still valid: the accepted documents are the ones whose
    manifests are checked."""
    if isinstance(value, bool):
        return st.just(not value)
    if isinstance(value, int):
        return st.sampled_from([value - 1, value + 1, value * 2, value // 2, value * 64])
    if isinstance(value, float):
        return st.sampled_from([value / 2, value * 2, value + 1e-9])
    if isinstance(value, str):
        return st.sampled_from([value + "x", value + "-1", value[:-1], value.upper(), value * 2])
    return st.just(value)


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, Any]:
    """An example with one to three mutations."""
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        places = _places(document)
        path = draw(st.sampled_from(places))
        parent, key = _at(document, path[:-1]), path[-1]
        operation = draw(st.sampled_from(["set", "drop", "add", "grow", "number", "text", "nudge"]))
        if operation == "set":
            parent[key] = draw(_values)
        elif operation == "drop":
            del parent[key]
        elif operation == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(KNOWN_KEYS) | st.text(max_size=12))] = draw(_values)
        elif operation == "grow" and isinstance(parent, list):
            parent.extend(copy.deepcopy(parent[key]) for _ in range(draw(st.integers(1, 70))))
        elif operation == "number":
            parent[key] = draw(_extreme_ints | st.integers(-5, 300))
        elif operation == "text":
            parent[key] = draw(st.sampled_from(ODD_TEXT) | st.text(min_size=1, max_size=80))
        elif operation == "nudge":
            parent[key] = draw(_nudged(parent[key]))
        if not isinstance(document, dict) or not document:
            break
    return document


def _manifests(experiment: BenchmarkExperiment) -> list[dict[str, Any]]:
    """Everything the Kubernetes back end would create for the experiment's last run, at
    its last attempt (the longest names)."""
    spec, name = experiment.spec, experiment.metadata.name
    ref = ExperimentRef(name=name, namespace="bench", uid=UID)
    trace = TRACE if spec.workload.trace is not None else None
    run = plan_experiment(experiment, trace=trace).runs[-1]
    names = ChildNames(experiment=name, index=run.index, attempt=spec.execution.retries + 1)
    manifests = []
    for variant, engine in spec.engines().items():
        manifests += worker_objects(ref, spec, variant, engine)
    for arm in spec.routing:
        if arm.router is not None:
            urls = ["http://10.0.0.1:8000"]
            manifests += router_objects(ref, arm.router, names, urls)
    endpoint = UrlEndpoint(arm=run.arm, url=f"http://{ref.service}.bench.svc:8000")
    config = build_run_config(spec, run, endpoint, [], spec.simulator.on_cluster, trace)
    results = result_configmap_names(names.prefix)
    manifests += load_objects(ref, names, config, results)
    manifests.append(load_job(ref, spec, names, results))
    return manifests


def _name_problems(manifest: dict[str, Any]) -> list[str]:
    """Names and labels Kubernetes would refuse (its JSON schemas do not check them)."""
    meta = manifest["metadata"]
    rule = _DNS_1035 if manifest["kind"] == "Service" else _DNS_1123
    problems = [] if rule.fullmatch(meta["name"]) else [f"name {meta['name']!r}"]
    if manifest["kind"] == "StatefulSet" and len(meta["name"]) > 52:
        problems.append(f"StatefulSet name {meta['name']!r} leaves no room for its pods' hash")
    template = manifest.get("spec", {}).get("template", {}).get("metadata", {})
    for labels in (meta.get("labels", {}), template.get("labels", {})):
        problems += [f"label {k}={v!r}" for k, v in labels.items() if not _LABEL_VALUE.fullmatch(v)]
    return problems


def _nulls_pruned(node: Any) -> Any:
    """The document as the API server validates it: a null field is dropped first (none of
    the CRD's fields is nullable)."""
    if isinstance(node, dict):
        return {k: _nulls_pruned(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_nulls_pruned(v) for v in node]
    return node


def _check(document: Any, counts: Counter[str]) -> None:
    try:
        experiment = parse_experiment(document, "fuzz")
    except SpecError as err:
        counts["refused"] += 1
        assert err.problems, "a SpecError lists its problems"
        roots = [*_ROOTS, *(document if isinstance(document, dict) else [])]
        for problem in err.problems:
            named = [r for r in roots if problem.startswith(r) and problem[len(r)] in ".:["]
            assert named, f"no field path in {problem!r}"
            assert ": " in problem, f"no message after the path in {problem!r}"
        return
    counts["accepted"] += 1
    defaults = {"apiVersion": API_VERSION, "kind": KIND}
    admission = validate_manifest({**defaults, **_nulls_pruned(document)})
    assert admission == [], f"the CRD refuses what the models accept: {admission}"
    stored = parse_experiment(resolved_experiment(experiment), "store")
    assert stored.spec == experiment.spec, "the stored spec reads back as another spec"
    for manifest in _manifests(experiment):
        assert validate_manifest(manifest) == [], manifest["kind"]
        assert _name_problems(manifest) == [], manifest["kind"]


def test_mutated_examples_are_refused_naming_a_field_or_render_valid_manifests() -> None:
    counts: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES_RUN,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_mutated())
    def check(document: dict[str, Any]) -> None:
        _check(document, counts)

    check()
    print(f"spec fuzz: {sum(counts.values())} documents, {counts['accepted']} accepted, "
          f"{counts['refused']} refused")  # fmt: skip
    assert counts["accepted"] >= 20 and counts["refused"] >= 100, counts


def test_the_examples_themselves_pass_the_same_checks() -> None:
    counts: Counter[str] = Counter()
    for document in EXAMPLES:
        _check(copy.deepcopy(document), counts)
    assert counts == {"accepted": len(EXAMPLES)}
