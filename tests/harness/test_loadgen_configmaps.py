"""A load generator's result in ConfigMaps, on a real API server (1.20): a 10,000-request
document is chunked and read back byte for byte, a reader never sees a partial or mixed
document, writes outlast a briefly absent API server, the Job's service account may write
exactly its ConfigMaps and nothing else, and a real Job writes a real result there."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import urllib3
from click.testing import CliRunner
from kubernetes.client.exceptions import ApiException

from kvbench.cli.loadgen import loadgen
from kvbench.kube.results import (
    CONFIGMAP_BUDGET,
    ResultConfigMapError,
    ensure_result_configmaps,
    read_result_document,
    result_configmap_names,
    write_result,
)
from kvbench.loadgen.results import read_result
from kvbench.testing.cluster import TestCluster
from kvbench.testing.controlplane import write_kubeconfig
from kvbench.testing.wait import wait_for

MiB = 1024 * 1024
PROJECT_IMAGE = "ghcr.io/kvbench/kvbench:0.1.0"
"""The project image as the real nodes hold it (`kvbench.testing.node.images`)."""
MODEL = "Qwen/Qwen3-0.6B"
NAMES = result_configmap_names("exp-r3-a1")


def _document(size: int, seed: int = 0) -> bytes:
    """Incompressible bytes, like the wall-clock gaps that make up most of a real result."""
    return random.Random(seed).randbytes(size)


def _owner(core: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, Any]:
    """An object that owns the result ConfigMaps, as the experiment does (one that does not
    exist would have them collected at once)."""
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}


@pytest.fixture
def result_configmaps(core: kubernetes.client.CoreV1Api, namespace: str) -> list[str]:
    """The attempt's empty ConfigMaps, as the operator creates them before the Job."""
    ensure_result_configmaps(core, namespace, NAMES, {"test": "results"}, _owner(core, namespace))
    return NAMES


def _stored_bytes(configmap: kubernetes.client.V1ConfigMap) -> int:
    """What the API server counts against a ConfigMap's 1 MiB: keys and (decoded) values."""
    data = sum(len(k) + len(v.encode()) for k, v in (configmap.data or {}).items())
    binary = configmap.binary_data or {}
    return data + sum(len(k) + len(v) * 3 // 4 for k, v in binary.items())


def test_a_ten_thousand_request_document_is_chunked_and_read_back_exactly(
    core: kubernetes.client.CoreV1Api, namespace: str, result_configmaps: list[str]
) -> None:
    document = _document(int(1.6 * MiB))
    write_result(core, namespace, result_configmaps, document)
    assert read_result_document(core, namespace, result_configmaps) == document
    stored = [core.read_namespaced_config_map(n, namespace) for n in result_configmaps]
    assert [c.data and c.data["index"] for c in stored] == ["0", "1", None, None]
    assert all(c.data is None or c.data["chunks"] == "2" for c in stored)
    assert max(_stored_bytes(c) for c in stored) <= CONFIGMAP_BUDGET < MiB


def test_a_document_needing_more_chunks_than_names_is_refused_before_any_write(
    core: kubernetes.client.CoreV1Api, namespace: str, result_configmaps: list[str]
) -> None:
    with pytest.raises(ResultConfigMapError, match=r"needs 5 ConfigMaps .* only 4"):
        write_result(core, namespace, result_configmaps, _document(4 * CONFIGMAP_BUDGET))
    stored = [core.read_namespaced_config_map(n, namespace) for n in result_configmaps]
    assert all(c.binary_data is None for c in stored)


class _Watched:
    """The API, with a reader looking at the ConfigMaps after every write the writer makes."""

    def __init__(self, api: kubernetes.client.CoreV1Api, look: Callable[[], object]) -> None:
        self.api, self.look, self.seen = api, look, []

    def patch_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        written = self.api.patch_namespaced_config_map(*args, **kwargs)
        self.seen.append(self.look())
        return written


def test_a_reader_sees_the_whole_document_or_none_never_part_or_a_mixture(
    core: kubernetes.client.CoreV1Api, namespace: str, result_configmaps: list[str]
) -> None:
    def look() -> tuple[bytes | None, str | None]:
        """What a reader gets, and the chunk count names[0] shows."""
        first = core.read_namespaced_config_map(result_configmaps[0], namespace)
        document = read_result_document(core, namespace, result_configmaps)
        return document, (first.data or {}).get("chunks")

    first, second = _document(int(2.5 * MiB), seed=1), _document(int(1.2 * MiB), seed=2)
    assert look() == (None, None)
    watched = _Watched(core, look)
    write_result(watched, namespace, result_configmaps, first)  # type: ignore[arg-type]
    # names[0] says how many chunks only once the others are there
    assert watched.seen == [(None, None), (None, None), (first, "3")]
    # A retried pod rewrites the same ConfigMaps: between its writes (or if it dies there)
    # names[0] still describes the first document, the chunks are of two, and the reader
    # must not take them for one.
    watched.seen.clear()
    write_result(watched, namespace, result_configmaps, second)  # type: ignore[arg-type]
    assert watched.seen == [(None, "3"), (second, "2")]


class _Flaky:
    """The API, answering the first patches with the errors of an API server going away."""

    def __init__(self, api: kubernetes.client.CoreV1Api, errors: list[Exception]) -> None:
        self.api, self.errors, self.calls = api, errors, 0

    def patch_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.api.patch_namespaced_config_map(*args, **kwargs)


def test_writes_are_retried_while_the_api_server_is_away_and_not_when_refused(
    core: kubernetes.client.CoreV1Api, namespace: str, result_configmaps: list[str]
) -> None:
    document = _document(1000)
    away = [
        ApiException(status=503, reason="Service Unavailable"),
        urllib3.exceptions.MaxRetryError(None, "/", "Connection refused"),  # type: ignore[arg-type]
        ApiException(status=409, reason="Conflict"),
    ]
    flaky = _Flaky(core, away)
    write_result(flaky, namespace, result_configmaps, document)  # type: ignore[arg-type]
    assert flaky.calls == 4
    assert read_result_document(core, namespace, result_configmaps) == document
    refused = _Flaky(core, [ApiException(status=403, reason="Forbidden")])
    with pytest.raises(ApiException, match="Forbidden"):
        write_result(refused, namespace, result_configmaps, document)  # type: ignore[arg-type]
    assert refused.calls == 1


def _service_account_api(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    names: list[str],
    kubeconfig: Path,
) -> kubernetes.client.CoreV1Api:
    """A client acting as the service account `loadgen` (`_writer_account`); its kubeconfig
    is written to `kubeconfig`."""
    _writer_account(cluster, core, namespace, names)
    account = wait_for(
        lambda: core.read_namespaced_service_account("loadgen", namespace).secrets,
        30,
        "the service account's token secret",
    )
    secret = core.read_namespaced_secret(account[0].name, namespace)
    token = base64.b64decode(secret.data["token"]).decode()
    write_kubeconfig(kubeconfig, cluster.access.model_copy(update={"token": token}), "loadgen")
    return kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    )


def _writer_account(
    cluster: TestCluster, core: kubernetes.client.CoreV1Api, namespace: str, names: list[str]
) -> None:
    """The service account `loadgen`, allowed what the operator allows a load generator."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.api_client())
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "loadgen"}})
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": names,
            "verbs": ["get", "update", "patch"]}  # fmt: skip
    role = {"metadata": {"name": "loadgen"}, "rules": [rule]}
    rbac.create_namespaced_role(namespace, role)
    binding = {
        "metadata": {"name": "loadgen"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "loadgen"},
        "subjects": [{"kind": "ServiceAccount", "name": "loadgen", "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)


def test_the_service_account_writes_its_configmaps_and_is_refused_any_other(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    result_configmaps: list[str],
    tmp_path: Path,
) -> None:
    writer = _service_account_api(cluster, core, namespace, result_configmaps, tmp_path / "kc")
    document = _document(int(1.6 * MiB), seed=3)
    write_result(writer, namespace, result_configmaps, document)
    assert read_result_document(writer, namespace, result_configmaps) == document
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "other"}})
    attempts: dict[str, Callable[[], object]] = {
        "write another": lambda: write_result(writer, namespace, ["other"], b"x"),
        "read another": lambda: writer.read_namespaced_config_map("other", namespace),
        "create": lambda: writer.create_namespaced_config_map(
            namespace, {"metadata": {"name": "new"}}
        ),
        "delete its own": lambda: writer.delete_namespaced_config_map(NAMES[0], namespace),
        "list": lambda: writer.list_namespaced_config_map(namespace),
    }
    statuses = {}
    for what, attempt in attempts.items():
        with pytest.raises(ApiException) as refused:
            attempt()
        statuses[what] = refused.value.status
    assert statuses == dict.fromkeys(attempts, 403)


def test_outside_a_pod_the_cli_writes_with_the_kubeconfig(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    result_configmaps: list[str],
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    _service_account_api(cluster, core, namespace, result_configmaps, kubeconfig)
    config = tmp_path / "run.json"
    config.write_text(json.dumps(_run_config("http://127.0.0.1:9")))  # refused: error records
    out = f"{namespace}/{','.join(result_configmaps)}"
    command = [sys.executable, "-m", "kvbench", "loadgen", "--config", str(config),
               "--out-configmaps", out, "--out", str(tmp_path / "result.json.gz")]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    document = read_result_document(core, namespace, result_configmaps)
    assert document == (tmp_path / "result.json.gz").read_bytes()
    assert read_result(document).summary.errors == 12


def test_the_cli_needs_somewhere_to_write_and_names_its_configmaps(tmp_path: Path) -> None:
    config = tmp_path / "run.json"
    config.write_text("{}")
    for args, error in [
        ([], "give --out, --out-configmaps or both"),
        (["--out-configmaps", "just-a-name"], "expected NAMESPACE/NAME0,NAME1,..."),
        (["--out-configmaps", "ns/"], "expected NAMESPACE/NAME0,NAME1,..."),
    ]:
        result = CliRunner().invoke(loadgen, ["--config", str(config), *args])
        assert result.exit_code == 2 and error in result.output, result.output


def _run_config(url: str) -> dict[str, Any]:
    """Three prefixes of 64 tokens, 12 measured requests of 8 output tokens."""
    return {
        "runId": "exp.service.p3-c4.t1",
        "model": MODEL,
        "target": {"kind": "url", "url": url},
        "workload": {
            "sharedPrefix": {"prefixes": [3], "prefixTokens": 64, "suffixTokens": 16,
                             "outputTokens": 8, "requestsPerPrefix": 4, "minRequests": 12}
        },
        "point": {"concurrency": 4, "prefixes": 3},
        "seed": 11,
    }  # fmt: skip


def _engine_pod() -> dict[str, Any]:
    engine = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.31.0",
        "args": [MODEL, "--port", "8000", "--enable-prompt-tokens-details"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    return {"metadata": {"name": "engine"}, "spec": {"containers": [engine]}}


def _ready_ip(core: kubernetes.client.CoreV1Api, name: str, namespace: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod.status.pod_ip if ready else None


def _ended(
    batch: kubernetes.client.BatchV1Api, name: str, namespace: str
) -> kubernetes.client.V1JobStatus | None:
    status = batch.read_namespaced_job(name, namespace).status
    return status if status.succeeded or status.failed else None


def test_a_load_generator_job_writes_its_result_into_its_configmaps(
    cluster: TestCluster,
    core: kubernetes.client.CoreV1Api,
    batch: kubernetes.client.BatchV1Api,
    namespace: str,
    result_configmaps: list[str],
) -> None:
    core.create_namespaced_pod(namespace, _engine_pod())
    ip = wait_for(lambda: _ready_ip(core, "engine", namespace), 120, "a ready engine")
    run = json.dumps(_run_config(f"http://{ip}:8000"))
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "run"}, "data": {"run.json": run}}
    )
    _writer_account(cluster, core, namespace, result_configmaps)
    out = f"{namespace}/{','.join(result_configmaps)}"
    container = {
        "name": "loadgen",
        "image": PROJECT_IMAGE,
        "command": ["kvbench", "loadgen", "--config", "/config/run.json", "--out-configmaps", out],
        "volumeMounts": [{"name": "run", "mountPath": "/config"}],
    }
    pod = {
        "serviceAccountName": "loadgen",
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "run", "configMap": {"name": "run"}}],
    }
    job = {"metadata": {"name": "load"}, "spec": {"backoffLimit": 0, "template": {"spec": pod}}}
    batch.create_namespaced_job(namespace, job)
    status = wait_for(lambda: _ended(batch, "load", namespace), 180, "the Job to end")
    logs = "".join(
        core.read_namespaced_pod_log(p.metadata.name, namespace)
        for p in core.list_namespaced_pod(namespace, label_selector="job-name=load").items
    )
    assert status.succeeded == 1, logs
    document = read_result_document(core, namespace, result_configmaps)
    assert document is not None, logs
    result = read_result(document)
    assert result.conditions.run_id == "exp.service.p3-c4.t1"
    assert (result.summary.requests, result.summary.errors) == (12, 0)
    assert f"ConfigMaps {out}" in logs
