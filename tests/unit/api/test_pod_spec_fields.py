"""The spec fields for real pods (model cache, /dev/shm, RuntimeClass, router resources, the
user the workers run as): each mistake is refused naming its field, each fix is accepted, and
the CRD takes what the models take."""

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import SpecError, parse_experiment
from kvbench.api.kube import Resources
from kvbench.kube.validation import validate_manifest

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())


def _document(**changes: Any) -> dict[str, Any]:
    """The KV-aware example with `changes` to its spec: keys joined by `__` (list indices as
    numbers) to a value."""
    document = copy.deepcopy(BASE)
    for path, value in changes.items():
        node: Any = document["spec"]
        *parents, last = path.split("__")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[last] = copy.deepcopy(value)
    return document


def _refused_at(document: dict[str, Any], field: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_experiment(document, "case.yaml")
    message = str(caught.value)
    lines = [line.strip() for line in message.splitlines()[1:]]
    assert any(re.match(re.escape(field) + r"[: ]", line) for line in lines), message
    return message


@pytest.mark.parametrize(
    ("mount", "why"),
    [
        ("/root/.cache/huggingface", "mode 0700"),
        ("/root", "mode 0700"),
        ("/dev/shm", "shared memory"),
        ("/tmp/", "scratch"),
    ],
)
def test_a_model_cache_where_the_workers_cannot_write_is_refused(mount: str, why: str) -> None:
    fixed = {"mountPath": "/data/hf-cache", "persistentVolumeClaim": "hf"}
    parse_experiment(_document(engine__modelCache=fixed))
    message = _refused_at(
        _document(engine__modelCache={**fixed, "mountPath": mount}),
        "spec.engine.modelCache.mountPath",
    )
    assert why in message


def test_a_model_cache_is_one_shared_claim_or_one_claim_per_pod_not_both() -> None:
    per_pod = {"perPodClaim": {"size": "50Gi"}}
    assert parse_experiment(_document(engine__modelCache=per_pod)).spec.engine.model_cache
    message = _refused_at(
        _document(engine__modelCache={**per_pod, "persistentVolumeClaim": "hf"}),
        "spec.engine.modelCache",
    )
    assert "perPodClaim" in message
    _refused_at(
        _document(engine__modelCache={"perPodClaim": {"storageClassName": "fast"}}),
        "spec.engine.modelCache.perPodClaim.size",
    )
    _refused_at(
        _document(engine__modelCache={"perPodClaim": {"size": "50Gi", "storageClassName": "A"}}),
        "spec.engine.modelCache.perPodClaim.storageClassName",
    )


@pytest.mark.parametrize("name", ["USER", "LOGNAME"])
def test_the_user_the_workers_run_as_is_kvbenchs_to_name(name: str) -> None:
    message = _refused_at(
        _document(engine__env=[{"name": name, "value": "root"}]), "spec.engine.env"
    )
    assert "USER, LOGNAME" in message


def test_pool_fields_for_real_gpus_are_checked_at_their_field() -> None:
    good = {"workers__0__shmSize": "16Gi", "workers__0__runtimeClassName": "nvidia"}
    pool = parse_experiment(_document(**good)).spec.workers[0]
    assert (pool.shm_size, pool.runtime_class_name) == (16 << 30, "nvidia")
    _refused_at(_document(workers__0__shmSize="lots"), "spec.workers[0].shmSize")
    _refused_at(
        _document(workers__0__runtimeClassName="NVIDIA_runtime"),
        "spec.workers[0].runtimeClassName",
    )


def test_router_resources_are_checked_as_the_api_server_would() -> None:
    resources = {"requests": {"cpu": "8"}, "limits": {"cpu": "4"}}
    message = _refused_at(
        _document(routing__1__router__resources=resources), "spec.routing[1].router.resources"
    )
    assert "above its limit" in message


def test_defaults_fill_only_what_the_spec_names_in_neither_requests_nor_limits() -> None:
    """A CPU request keeps its CPU limit unset, a memory limit alone its request unset (which
    Kubernetes then sets to the limit): no default can exceed or contradict a value given."""
    mine = Resources(requests={"cpu": "3"}, limits={"memory": "2Gi", "nvidia.com/gpu": 1})
    merged = mine.with_defaults(
        {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}, {"memory": "4Gi", "cpu": "2"}
    )
    assert merged.requests == {"cpu": "3", "ephemeral-storage": "1Gi"}
    assert merged.limits == {"memory": "2Gi", "nvidia.com/gpu": 1}
    assert Resources().with_defaults({"cpu": "1"}, {"memory": "4Gi"}) == Resources(
        requests={"cpu": "1"}, limits={"memory": "4Gi"}
    )


def test_the_crd_takes_the_new_fields() -> None:
    document = _document(
        engine__modelCache={"perPodClaim": {"size": "50Gi", "storageClassName": "fast"}},
        workers__0__shmSize="16Gi",
        workers__0__runtimeClassName="nvidia",
        routing__1__router__resources={"requests": {"cpu": 2}, "limits": {"memory": "8Gi"}},
    )
    parse_experiment(document)
    assert validate_manifest(document) == []
