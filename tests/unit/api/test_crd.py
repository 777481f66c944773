"""The CRD in crds/ is generated from the models, structural, and agrees with them."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from openapi_schema_validator import OAS30Validator

from kvbench.api.crd import crd_manifest, crd_yaml
from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[3]
CRD_FILE = ROOT / "crds" / "benchmarkexperiments.kvbench.io.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "bench" / "real-vllm-experiments").glob("*.yaml")
)


def _schema() -> dict[str, Any]:
    return crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), "run `kvbench crd -o crds/...` and commit it"


def test_kvbench_crd_prints_the_same_yaml() -> None:
    result = CliRunner().invoke(main, ["crd"])
    assert result.exit_code == 0
    assert result.output == CRD_FILE.read_text()


def _walk(node: dict[str, Any], path: str):
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural() -> None:
    """Every node has a type (or is int-or-string / free-form), and no JSON Schema leftovers."""
    for path, node in _walk(_schema(), "$"):
        assert "$ref" not in node and "anyOf" not in node and "const" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        if node.get("type") == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
        for junctor in ("oneOf", "allOf"):
            for branch in node.get(junctor, []):
                assert set(branch) <= {"required"}, f"{path}: {junctor} may only require"
        assert not isinstance(node.get("exclusiveMinimum"), int | float) or isinstance(
            node.get("exclusiveMinimum"), bool
        ), path


def test_status_subresource_and_printer_columns() -> None:
    version = crd_manifest()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Progress", "Current", "Hit rate", "Age"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    for name, path in columns.items():
        if not path.startswith(".status."):
            continue
        node = status
        for part in path.removeprefix(".status.").split("."):
            assert part in node.get("properties", {}), f"column {name}: {path} is not in status"
            node = node["properties"][part]
    assert crd_manifest()["spec"]["names"]["shortNames"] == ["bx"]


def test_schema_carries_real_constraints() -> None:
    spec = _schema()["properties"]["spec"]
    engine = spec["properties"]["engine"]["properties"]
    assert engine["kvCacheDtype"]["enum"] == ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert engine["maxNumSeqs"]["minimum"] == 1
    assert engine["kvCacheMemoryBytes"]["x-kubernetes-int-or-string"] is True
    assert "pattern" in spec["properties"]["timeouts"]["properties"]["run"]
    assert spec["properties"]["routing"]["x-kubernetes-list-type"] == "map"
    assert {"engine", "workers", "routing", "workload", "load"} <= set(spec["required"])
    assert spec["x-kubernetes-validations"], "CEL rules on the spec"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_crd_schema(example: Path) -> None:
    document = yaml.safe_load(example.read_text())
    OAS30Validator(_schema()).validate(document)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["spec"]["load"].update(concurrency=[0]),
        lambda d: d["spec"]["engine"].update(kvCacheDtype="int4"),
        lambda d: d["spec"]["routing"][0].update(router={"policy": "round_robin"}),
        lambda d: d["spec"]["timeouts"].update(run="ten minutes"),
        lambda d: d["spec"].pop("workload"),
    ],
    ids=["concurrency-0", "bad-enum", "two-arm-kinds", "bad-duration", "no-workload"],
)
def test_crd_schema_rejects_what_it_can(mutate) -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"].setdefault("timeouts", {})
    mutate(document)
    assert not OAS30Validator(_schema()).is_valid(document)
