"""The hostile specs of the end-to-end table (tests/e2e/hostile_specs.py), checked offline:
each is refused by the models naming its field, and refused by the CRD's schema exactly when
the table says the API server refuses it at admission; the base they change is valid."""

from typing import Any

import pytest
from e2e_table import hostile

from kvbench.api import SpecError, parse_experiment
from kvbench.api.crd import crd_manifest
from kvbench.kube.cluster import kube_problems
from kvbench.kube.validation import validate_manifest

_SCHEMA = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_table_is_large_and_its_base_valid() -> None:
    assert len(hostile.CASES) >= 40
    assert len({case.id for case in hostile.CASES}) == len(hostile.CASES)
    assert parse_experiment(hostile.base_document("base")).spec.total_workers == 2


def test_the_literal_arguments_are_accepted_as_written() -> None:
    document = hostile.base_document("literal-args")
    document["spec"]["engine"]["extraArgs"] = hostile.LITERAL_ARGS
    assert parse_experiment(document).spec.engine.extra_args == hostile.LITERAL_ARGS
    assert validate_manifest(document) == []


def _refusal(document: dict) -> str:
    """Why the operator refuses the document: the models' SpecError, or what the Kubernetes
    back end cannot run; empty if it would run it."""
    try:
        experiment = parse_experiment(document, "case")
    except SpecError as err:
        return str(err)
    return "\n".join(kube_problems(experiment.spec))


@pytest.mark.parametrize("case", hostile.CASES, ids=[c.id for c in hostile.CASES])
def test_the_operator_refuses_it_naming_the_field(case) -> None:
    message = _refusal(case.document())
    assert hostile.names_field(message, case.field), message
    assert case.also.lower() in message.lower(), message


def _duplicate_map_keys(node: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What the API server refuses beyond the OpenAPI schema the offline validator reads:
    two items with one key in a `x-kubernetes-list-type: map` list."""
    found = []
    if isinstance(node, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in node:
                found += _duplicate_map_keys(node[key], sub, f"{path}.{key}".lstrip("."))
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(i.get(k) for k in schema["x-kubernetes-list-map-keys"]) for i in node]
            found += [f"{path}[{i}]: Duplicate value" for i, k in enumerate(keys) if k in keys[:i]]
        for i, item in enumerate(node):
            found += _duplicate_map_keys(item, schema["items"], f"{path}[{i}]")
    return found


@pytest.mark.parametrize("case", hostile.CASES, ids=[c.id for c in hostile.CASES])
def test_the_crd_schema_refuses_it_when_the_table_says_admission(case) -> None:
    document = case.document()
    errors = validate_manifest(document) + [
        f"{document['kind']}: {e}" for e in _duplicate_map_keys(document, _SCHEMA, "")
    ]
    if case.stage == "admission":
        assert errors, "the CRD's schema lets it through"
        assert any(hostile.names_field(e.split(": ", 1)[1], case.field) for e in errors), errors
    else:
        assert errors == [], "refused at admission, not by the operator"
