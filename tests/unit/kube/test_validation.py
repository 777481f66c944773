"""validate_manifest: Kubernetes' strict schemas for built-in kinds, our CRD's for experiments."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.kube.validation import DEFAULT_VERSION, schema_versions, validate_manifest

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENT = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
RECENT = [v for v in schema_versions() if tuple(map(int, v.split("."))) >= (1, 30)]

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}


def _deployment() -> dict[str, Any]:
    return copy.deepcopy(DEPLOYMENT)


def test_the_default_is_a_recent_kubernetes() -> None:
    assert RECENT, "the pinned kubernetes-validate ships no schemas for Kubernetes 1.30+"
    assert RECENT[-1] == DEFAULT_VERSION


@pytest.mark.parametrize("version", RECENT)
def test_a_valid_deployment_passes(version: str) -> None:
    assert validate_manifest(_deployment(), version) == []


def test_a_wrong_field_type_fails_naming_the_field() -> None:
    deployment = _deployment()
    deployment["spec"]["replicas"] = "three"
    [error] = validate_manifest(deployment)
    assert error.startswith("Deployment/web: spec.replicas: 'three' is not of type 'integer'")


def test_an_unknown_field_fails_naming_it() -> None:
    deployment = _deployment()
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    [error] = validate_manifest(deployment)
    assert "spec.template.spec.containers.0" in error and "'imagePullPolcy'" in error


def test_a_field_removed_from_kubernetes_fails_where_it_is_gone() -> None:
    """ObjectMeta.clusterName went away in 1.25: fine for 1.24, an error for 1.30+."""
    deployment = _deployment()
    deployment["metadata"]["clusterName"] = "east"
    assert validate_manifest(deployment, "1.24.0") == []
    for version in RECENT:
        [error] = validate_manifest(deployment, version)
        assert "metadata" in error and "'clusterName' was unexpected" in error


def test_an_api_version_removed_from_kubernetes_fails() -> None:
    cron_job = {
        "apiVersion": "batch/v1beta1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {}}}},
    }
    assert validate_manifest(cron_job, "1.24.0") == []
    [error] = validate_manifest(cron_job)
    assert error.startswith("CronJob/nightly:") and "batch/v1beta1" in error


def test_a_manifest_without_kind_fails() -> None:
    deployment = _deployment()
    del deployment["kind"]
    assert validate_manifest(deployment) == ["?/web: apiVersion and kind are required"]


def test_an_unknown_kubernetes_version_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match=r"no schemas for Kubernetes 1\.99\.0"):
        validate_manifest(_deployment(), "1.99.0")


def test_an_experiment_validates_against_our_crd() -> None:
    assert validate_manifest(copy.deepcopy(EXPERIMENT)) == []


def test_an_invalid_experiment_fails_with_every_field_named() -> None:
    experiment = copy.deepcopy(EXPERIMENT)
    experiment["spec"]["load"]["concurrency"] = [0]
    experiment["spec"]["engine"]["kvCacheDtype"] = "int4"
    prefix = f"BenchmarkExperiment/{EXPERIMENT['metadata']['name']}: spec."
    errors = validate_manifest(experiment)
    assert all(error.startswith(prefix) for error in errors), errors
    fields = [error.removeprefix(prefix).split(":")[0] for error in errors]
    assert fields == ["engine.kvCacheDtype", "load.concurrency.0"]


def test_an_experiment_of_a_version_the_crd_does_not_serve_fails() -> None:
    experiment = copy.deepcopy(EXPERIMENT)
    experiment["apiVersion"] = "kvbench.io/v1"
    [error] = validate_manifest(experiment)
    assert "the CRD serves kvbench.io/v1alpha1 only" in error
