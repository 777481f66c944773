"""Check manifests offline against the schemas the API server would apply.

A chart or child manifest that Kubernetes would reject should fail a unit test, not an install.
Built-in kinds are checked against the JSON schemas that kubernetes-validate ships for each
Kubernetes release, in their strict form: an unknown or removed field is an error, as it is for
`kubectl apply` (strict field validation). BenchmarkExperiments are checked against our own
CRD's openAPIV3Schema, generated from the models.

A test-time tool: kubernetes-validate and openapi-schema-validator are `test` dependencies.
"""

from functools import cache
from typing import Any

import kubernetes_validate
from kubernetes_validate.utils import all_versions
from openapi_schema_validator import OAS30Validator

from kvbench.api.crd import crd_manifest
from kvbench.api.experiment import API_VERSION, GROUP, KIND

__all__ = ["DEFAULT_VERSION", "schema_versions", "validate_manifest"]


@cache
def schema_versions() -> tuple[str, ...]:
    """The Kubernetes releases (`1.30.0`, ...) whose schemas kubernetes-validate ships, oldest
    first."""
    return tuple(sorted(set(all_versions()), key=lambda v: tuple(map(int, v.split(".")))))


DEFAULT_VERSION = schema_versions()[-1]
"""The newest release the pinned kubernetes-validate knows (1.31.0 for 1.31.0)."""


def _name(manifest: dict[str, Any]) -> str:
    name = manifest.get("metadata", {}).get("name", "?")
    return f"{manifest.get('kind', '?')}/{name}"


def _path(parts: Any) -> str:
    return ".".join(str(part) for part in parts) or "(root)"


def _validate_experiment(manifest: dict[str, Any]) -> list[str]:
    """Our custom resource, against the CRD generated from the models."""
    if manifest["apiVersion"] != API_VERSION:
        return [f"{_name(manifest)}: apiVersion: the CRD serves {API_VERSION} only"]
    schema = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    errors = OAS30Validator(schema).iter_errors(manifest)
    return sorted(
        f"{_name(manifest)}: {_path(error.absolute_path)}: {error.message}" for error in errors
    )


def validate_manifest(manifest: dict[str, Any], version: str = DEFAULT_VERSION) -> list[str]:
    """Why a Kubernetes `version` API server would reject `manifest`; empty if it would not.

    kubernetes-validate stops at a manifest's first error, so a built-in kind yields at most
    one; a kind or API version that `version` no longer serves is an error too.
    """
    if version not in schema_versions():
        raise ValueError(f"no schemas for Kubernetes {version}; have {schema_versions()}")
    if not manifest.get("apiVersion") or not manifest.get("kind"):
        return [f"{_name(manifest)}: apiVersion and kind are required"]
    if manifest["kind"] == KIND and manifest["apiVersion"].rpartition("/")[0] == GROUP:
        return _validate_experiment(manifest)
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = _path(error.absolute_path)
        return [f"{_name(manifest)}: {where}: {error.message} (Kubernetes {version})"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{_name(manifest)}: {error.message}"]
    return []
