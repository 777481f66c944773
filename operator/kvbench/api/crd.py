"""The CustomResourceDefinition, generated from the pydantic models (never edited by hand).

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3.0 schema:
no `$ref`, no `null` types, boolean `exclusiveMinimum`, and free-form objects marked with
`x-kubernetes-preserve-unknown-fields`. This module does that translation.
"""

from typing import Any

import yaml
from pydantic import BaseModel

from kvbench.api.experiment import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    VERSION,
    ExperimentSpec,
    ObjectMeta,
)
from kvbench.api.status import ExperimentStatus

__all__ = ["crd_manifest", "crd_yaml", "openapi_schema"]

_DROP = {
    "title",
    "additionalProperties",
    "discriminator",
    "examples",
    "patternProperties",
    "propertyNames",
}
"""Dropped or rewritten: a structural schema has no key patterns (map keys are checked by
the models, i.e. by the operator), and `additionalProperties` is set below."""
_SCALAR_TYPES = {"string", "integer", "number", "boolean"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline `$ref`s and turn JSON Schema constructs into their OpenAPI v3.0 forms."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **extra}, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            return _resolve({**options[0], **rest}, defs)
        node = {**rest, "anyOf": options}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and isinstance(value, dict | list)):
            continue
        if key == "default" and value in (None, ""):
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "description":
            out[key] = " ".join(value.split())
            continue
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
            continue
        out[key] = _resolve(value, defs)
    if out.get("type") == "object" and "properties" not in out:
        extra = node.get("additionalProperties")
        if "patternProperties" in node:
            (extra,) = node["patternProperties"].values()
        if isinstance(extra, dict):
            out["additionalProperties"] = _resolve(extra, defs)
        elif not out.get("x-kubernetes-preserve-unknown-fields"):
            out["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in out and "type" not in out:
        kinds = {type(v).__name__ for v in out["enum"]}
        out["type"] = {"str": "string", "int": "integer", "float": "number"}.get(kinds.pop())
    if out.get("type") == "object" and "properties" in out and not out["properties"]:
        out.pop("properties")
    if out.get("type") not in _SCALAR_TYPES | {"object", "array"} and "type" in out:
        raise ValueError(f"no OpenAPI type for {out['type']!r}")
    return out


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A structural OpenAPI v3.0 schema of a model, as the API server validates it."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    return _resolve(schema, defs)


def _empty_object_members(schema: dict[str, Any]) -> None:
    """Members such as `service: {}` carry no fields; keep them from being pruned away."""
    for sub in schema.get("properties", {}).values():
        if sub.get("type") == "object" and not {"properties", "additionalProperties"} & set(sub):
            sub.setdefault("x-kubernetes-preserve-unknown-fields", True)
        _empty_object_members(sub)
    if "items" in schema:
        _empty_object_members(schema["items"])


def _metadata_schema() -> dict[str, Any]:
    """The name rule of the models (children are named `<name>-r<i>-a<k>-load` and must stay
    within Kubernetes' 63 characters): the API server refuses a longer name at admission.
    The name is all a CRD may constrain of metadata."""
    name = openapi_schema(ObjectMeta)["properties"]["name"]
    return {"type": "object", "properties": {"name": name}}


def crd_manifest() -> dict[str, Any]:
    """The whole CustomResourceDefinition as a dict."""
    spec_schema = openapi_schema(ExperimentSpec)
    status_schema = openapi_schema(ExperimentStatus)
    _empty_object_members(spec_schema)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": [SHORT_NAME],
                "categories": ["kvbench"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {
                            "name": "Progress",
                            "type": "string",
                            "jsonPath": ".status.progress.display",
                        },
                        {
                            "name": "Current",
                            "type": "string",
                            "jsonPath": ".status.progress.currentRun",
                        },
                        {
                            "name": "Hit rate",
                            "type": "number",
                            "description": "Request hit rate of the last run recorded",
                            "jsonPath": ".status.lastRun.requestHitRate",
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A benchmark experiment: vLLM workers, routing arms, "
                            "a seeded workload; results land in status.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": _metadata_schema(),
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed in `crds/`."""
    header = "# Generated by `kvbench crd` from kvbench.api; do not edit by hand.\n"
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)
