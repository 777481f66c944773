"""Hostile and malformed experiments against the operator in the test cluster: every case of
hostile_specs.CASES is refused at admission by the CRD's schema, or fails with a condition
naming its field, and none starts a child; the operator pod never restarts; a normal
experiment applied first succeeds meanwhile; shell metacharacters in extraArgs reach the
engine as literal argv elements; an alias bomb, a 10 MB spec, a spec over etcd's limit and an
unknown field are refused before they exist."""

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from e2e_helpers import apply, get, wait_phase
from hostile_specs import CASES, LITERAL_ARGS, Hostile, alias_bomb, base_document, names_field
from kubernetes.client.rest import ApiException

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.kube.manifests import LABEL_UID
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import children
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow

BY_ID = {case.id: case for case in CASES}
_ACCEPTED = ("canary-", "literal-args-")
"""Name prefixes of the two experiments that run (a hostile case's children would start with
`h-`)."""


@dataclass
class Outcome:
    """What became of one case: the API server's refusal, or the resource it made."""

    refused: str | None = None
    uid: str | None = None
    body: dict[str, Any] | None = None


@dataclass
class Run:
    namespace: str
    outcomes: dict[str, Outcome]
    canary: dict[str, Any]
    literal: dict[str, Any]
    operator_pods: dict[str, int]
    """The operator's pods before the cases, by UID, with their containers' restarts."""


def _operator_pods(cluster: TestCluster, operator: dict[str, Any]) -> dict[str, int]:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    labels = operator["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods = core.list_namespaced_pod(operator["metadata"]["namespace"], label_selector=selector)
    return {
        p.metadata.uid: sum(c.restart_count for c in p.status.container_statuses or [])
        for p in pods.items
    }


def _refusal(err: ApiException) -> str:
    try:
        return json.loads(err.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{err.status} {err.reason}: {err.body}"


def _send(custom: kubernetes.client.CustomObjectsApi, namespace: str, case: Hostile) -> Outcome:
    try:
        made = custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, case.document()
        )
    except ApiException as err:
        return Outcome(refused=_refusal(err))
    return Outcome(uid=made["metadata"]["uid"])


def _await_ends(
    custom: kubernetes.client.CustomObjectsApi, namespace: str, outcomes: dict[str, Outcome]
) -> None:
    """Until every created case has ended, or for at most four minutes (a case that never
    ends then fails its own test, not all of them)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        by_uid = {item["metadata"]["uid"]: item for item in listed["items"]}
        created = [o for o in outcomes.values() if o.uid is not None]
        for outcome in created:
            outcome.body = by_uid.get(outcome.uid)
        phases = [((o.body or {}).get("status") or {}).get("phase") for o in created]
        if all(phase in ("Failed", "Succeeded") for phase in phases):
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def hostile(cluster: TestCluster, operator: dict[str, Any]) -> Iterator[Run]:
    """A namespace with a normal experiment and the literal-arguments one applied first, then
    every case sent at once; yields once each created case has ended."""
    namespace = f"hostile-{uuid.uuid4().hex[:6]}"
    cluster.ensure_namespace(namespace)
    pods = _operator_pods(cluster, operator)
    apply(cluster, namespace, base_document("canary"))
    literal = base_document("literal-args")
    literal["spec"]["engine"]["extraArgs"] = LITERAL_ARGS
    literal["spec"]["cleanup"] = {"keepWorkers": True}
    apply(cluster, namespace, literal)
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    started = time.monotonic()
    outcomes = {case.id: _send(custom, namespace, case) for case in CASES}
    sent = time.monotonic() - started
    _await_ends(custom, namespace, outcomes)
    refused = sum(o.refused is not None for o in outcomes.values())
    print(
        f"{len(CASES)} hostile specs sent in {sent:.1f} s: {refused} refused at admission, "
        f"{len(CASES) - refused} created and ended {time.monotonic() - started:.0f} s after "
        "the first was sent"
    )
    canary = wait_phase(cluster, namespace, "canary", {"Succeeded", "Failed"}, 600)
    literal_body = wait_phase(cluster, namespace, "literal-args", {"Succeeded", "Failed"}, 600)
    yield Run(namespace, outcomes, canary, literal_body, pods)
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    core.delete_namespace(namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 120, "hostile pods gone")


@pytest.mark.parametrize("case_id", list(BY_ID))
def test_hostile_spec_is_refused_naming_the_field(
    cluster: TestCluster, hostile: Run, case_id: str
) -> None:
    case, outcome = BY_ID[case_id], hostile.outcomes[case_id]
    if case.stage == "admission":
        assert outcome.refused is not None, f"the API server let it in: {outcome.body}"
        message = outcome.refused
    else:
        assert outcome.refused is None, f"refused at admission: {outcome.refused}"
        assert outcome.body is not None and outcome.uid is not None
        status = outcome.body.get("status") or {}
        assert status.get("phase") == "Failed", status
        failed = {c["type"]: c for c in status["conditions"]}["Failed"]
        assert failed["status"] == "True"
        message = failed["message"]
        assert children(cluster, hostile.namespace, outcome.uid) == []
    assert names_field(message, case.field), f"{case.field} not named in: {message}"
    assert case.also.lower() in message.lower(), message


def test_only_the_two_accepted_experiments_ever_had_pods_or_jobs(
    cluster: TestCluster, hostile: Run
) -> None:
    """The namespace's events name every pod, Job, StatefulSet and Service ever created or
    started there, also those deleted since: all are the two accepted experiments'."""
    events = kubernetes.client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        hostile.namespace
    )
    children = {
        f"{e.involved_object.kind}/{e.involved_object.name}"
        for e in events.items
        if e.involved_object.kind in ("Pod", "Job", "StatefulSet", "Service", "Deployment")
    }
    assert children, "no events at all: the check would prove nothing"
    others = sorted(c for c in children if not c.split("/")[1].startswith(_ACCEPTED))
    assert others == []


def test_the_operator_never_restarted(
    cluster: TestCluster, operator: dict[str, Any], hostile: Run
) -> None:
    assert _operator_pods(cluster, operator) == hostile.operator_pods


def test_a_normal_experiment_alongside_succeeds(hostile: Run) -> None:
    assert hostile.canary["status"]["phase"] == "Succeeded", hostile.canary["status"]


def _argv_with_env(entry: str) -> tuple[list[bytes], list[bytes]]:
    proc = Path("/proc") / entry
    try:
        return (
            (proc / "cmdline").read_bytes().split(b"\0"),
            (proc / "environ").read_bytes().split(b"\0"),
        )
    except OSError:
        return [], []


def _contains(argv: list[bytes], part: list[bytes]) -> bool:
    return any(argv[i : i + len(part)] == part for i in range(len(argv)))


def test_shell_metacharacters_reach_the_engine_as_literal_argv(
    cluster: TestCluster, hostile: Run
) -> None:
    assert hostile.literal["status"]["phase"] == "Succeeded", hostile.literal["status"]
    client = cluster.api_client()
    apps = kubernetes.client.AppsV1Api(client)
    uid = hostile.literal["metadata"]["uid"]
    (statefulset,) = apps.list_namespaced_stateful_set(
        hostile.namespace, label_selector=f"{LABEL_UID}={uid}"
    ).items
    args = statefulset.spec.template.spec.containers[0].args
    assert _contains([a.encode() for a in args], [a.encode() for a in LITERAL_ARGS]), args
    pods = kubernetes.client.CoreV1Api(client).list_namespaced_pod(
        hostile.namespace, label_selector=f"{LABEL_UID}={uid}"
    )
    literal = [a.encode() for a in LITERAL_ARGS]
    processes = [_argv_with_env(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    assert pods.items
    for pod in pods.items:
        ip = f"POD_IP={pod.status.pod_ip}".encode()
        engines = [argv for argv, env in processes if ip in env and b"--x-literal" in argv]
        assert engines, f"no engine process of {pod.metadata.name}"
        assert all(_contains(argv, literal) for argv in engines), engines


def _kubectl_file(cluster: TestCluster, name: str, text: str) -> str:
    path = Path(cluster.workdir) / name
    path.write_text(text)
    return str(path)


def _absent(cluster: TestCluster, namespace: str, name: str) -> bool:
    try:
        get(cluster, namespace, name)
    except ApiException as err:
        return err.status == 404
    return False


def _post_raw(cluster: TestCluster, namespace: str, body: bytes, content_type: str) -> Any:
    """POST a body as it is (kubectl would convert YAML to JSON first)."""
    client = cluster.api_client()
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    method, url, headers, _, _ = client.param_serialize(
        "POST", path, header_params={"Content-Type": content_type,
                                     "Accept": "application/json"},
        body=body, auth_settings=["BearerToken"],
    )  # fmt: skip
    response = client.call_api(method, url, header_params=headers, body=body)
    response.read()
    return response


def test_an_alias_bomb_is_refused_by_kubectl_and_by_the_api_server(
    cluster: TestCluster, hostile: Run
) -> None:
    text = alias_bomb("bomb")
    path = _kubectl_file(cluster, "bomb.yaml", text)
    started = time.monotonic()
    refused = cluster.kubectl("apply", "--validate=false", "-n", hostile.namespace, "-f", path)
    assert refused.returncode != 0 and "excessive aliasing" in refused.stderr, refused.stderr
    response = _post_raw(cluster, hostile.namespace, text.encode(), "application/yaml")
    assert response.status == 400 and b"excessive aliasing" in response.data, response.data
    print(f"alias bomb refused by kubectl and the API server in {time.monotonic() - started:.2f} s")
    assert _absent(cluster, hostile.namespace, "bomb")


def test_a_10_mb_spec_and_one_over_etcds_limit_are_refused(
    cluster: TestCluster, hostile: Run
) -> None:
    ten = base_document("ten-mb")
    ten["spec"]["engine"]["env"] = [{"name": "BIG", "value": "x" * (10 << 20)}]
    path = _kubectl_file(cluster, "ten-mb.json", json.dumps(ten))
    refused = cluster.kubectl("apply", "--validate=false", "-n", hostile.namespace, "-f", path)
    assert refused.returncode != 0 and "Request entity too large" in refused.stderr, refused.stderr
    big = base_document("etcd-big")  # every field within the schema, 1.8 MB in all
    big["spec"]["variants"] = [
        {"name": f"v{i}", "engine": {"extraArgs": ["y" * 4000] * 14}} for i in range(32)
    ]
    path = _kubectl_file(cluster, "etcd-big.json", json.dumps(big))
    refused = cluster.kubectl("create", "--validate=false", "-n", hostile.namespace, "-f", path)
    assert refused.returncode != 0 and "request is too large" in refused.stderr, refused.stderr
    assert _absent(cluster, hostile.namespace, "ten-mb")
    assert _absent(cluster, hostile.namespace, "etcd-big")


def test_an_unknown_field_is_refused_by_kubectl_and_pruned_without_its_validation(
    cluster: TestCluster, hostile: Run
) -> None:
    document = base_document("unknown-field")
    document["spec"]["engine"]["maxModelLength"] = 4096
    path = _kubectl_file(cluster, "unknown.yaml", yaml.safe_dump(document))
    refused = cluster.kubectl("apply", "-n", hostile.namespace, "-f", path)
    assert refused.returncode != 0, refused.stdout
    assert 'unknown field "maxModelLength"' in refused.stderr, refused.stderr
    assert "spec.engine" in refused.stderr, refused.stderr
    pruned = cluster.kubectl(
        "apply", "--validate=false", "--dry-run=server", "-o", "json",
        "-n", hostile.namespace, "-f", path,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert "maxModelLength" not in json.loads(pruned.stdout)["spec"]["engine"], "1.20 prunes"
    assert _absent(cluster, hostile.namespace, "unknown-field")


def test_every_experiment_left_can_be_deleted(cluster: TestCluster, hostile: Run) -> None:
    """Last: the operator lets each go (a 900 KB spec once left kopf unable to patch the
    resource, its finalizer and namespace stuck)."""
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    deleted = cluster.kubectl("delete", "bx", "--all", "--wait=false", "-n", hostile.namespace)
    assert deleted.returncode == 0, deleted.stderr

    def left() -> list[str]:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, hostile.namespace, PLURAL)
        return [item["metadata"]["name"] for item in items["items"]]

    wait_for(lambda: not left(), 180, "every experiment to be deleted")
