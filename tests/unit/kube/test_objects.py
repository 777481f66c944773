"""Create-or-patch tells an object that exists (409 AlreadyExists: patch it) from an API
server refusing the write (409 Conflict: raise, so the caller's retry asks again)."""

import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from kvbench.kube.objects import KubeObjects

MANIFEST = {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}


def _refusal(reason: str) -> ApiException:
    err = ApiException(status=409, reason="Conflict")
    err.body = json.dumps({"kind": "Status", "code": 409, "reason": reason})
    return err


def _objects(create_error: ApiException, patched: list[str]) -> KubeObjects:
    objects = KubeObjects(kubernetes.client.ApiClient())

    def create(namespace: str, body: dict) -> None:
        raise create_error

    def patch(name: str, namespace: str, body: dict) -> None:
        patched.append(name)

    objects._calls = lambda kind: (create, patch, None, None)  # type: ignore[method-assign]
    return objects


def test_an_object_that_exists_is_patched() -> None:
    patched: list[str] = []
    _objects(_refusal("AlreadyExists"), patched).apply(MANIFEST)
    assert patched == ["c"]


def test_a_refused_write_is_raised_not_taken_for_an_existing_object() -> None:
    patched: list[str] = []
    with pytest.raises(ApiException) as raised:
        _objects(_refusal("Conflict"), patched).apply(MANIFEST)
    assert raised.value.status == 409 and patched == []


def test_a_create_refused_with_409_conflict_is_retried_one_that_exists_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvbench.kube import results

    monkeypatch.setattr(results.time, "sleep", lambda _s: None)
    answers = [_refusal("Conflict"), _refusal("Conflict"), None]

    def create() -> str:
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return "created"

    assert results.with_retries(create, "creating", conflicts="unless-exists") == "created"
    with pytest.raises(ApiException):
        results.with_retries(
            lambda: (_ for _ in ()).throw(_refusal("AlreadyExists")), "creating",
            conflicts="unless-exists",
        )  # fmt: skip
