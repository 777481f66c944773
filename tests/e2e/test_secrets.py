"""One experiment on the test cluster with `engine.hubTokenSecret` (a Secret holding a random,
recognisable token), simulated workers behind a vllm-router arm, watched while it runs:

- the token reaches the workers' environment, and no other pod's;
- it never appears in the operator's logs, any pod's logs, Events, the experiment (status
  included), the children's specs, the ConfigMaps, nor in `kvbench fetch bx/NAME`'s output;
- the operator's account may not read Secrets at all, and only the load generator and the
  operator mount a service-account token;
- every pod that ran (workers, router, load generator, and the operator's own) passes the
  restricted Pod Security Standard as the API server admitted it (the 1.20 test cluster has
  no Pod Security admission, so `kvbench.kube.pod_security` is the check).
"""

import base64
import gzip
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_helpers import CPU_NODE_SHARE, GPU, apply, article_002_document, get, wait_phase
from kubernetes.client.exceptions import ApiException

from kvbench.kube.manifests import LABEL_COMPONENT
from kvbench.kube.pod_security import restricted_violations
from kvbench.testing.cluster import TestCluster

pytestmark = pytest.mark.slow

NAME = "with-token"
SECRET, KEY = "hub-token", "token"
READ_ONLY_ROOT = {"worker": True, "router": True, "loadgen": True, "operator": True}
"""The simulator, router and load generator, and the operator: images that write only to
their emptyDir /tmp (tests/unit/kube/test_pod_security.py has vLLM's, which does not)."""


@dataclass
class Observed:
    """What a namespace held while an experiment ran."""

    token: str
    namespace: str
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every pod seen, by UID, as the API server served it (camelCase, as in a manifest)."""
    logs: dict[str, str] = field(default_factory=dict)
    """`pod/container` -> its log as last read."""
    holders: set[str] = field(default_factory=set)
    """POD_NAME of every local process whose environment held the token ("?" if none)."""
    texts: dict[str, str] = field(default_factory=dict)
    """Where a leak would show, read after the experiment: name -> text."""


def _holders(needle: bytes) -> set[str]:
    """The pods (POD_NAME) of this machine's processes whose environment holds `needle`: on
    the test cluster a container is a local process with the pod's environment."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            names = [v for v in environ.split(b"\0") if v.startswith(b"POD_NAME=")]
            found.add(names[0].decode().split("=", 1)[1] if names else "?")
    return found


class Watcher:
    """Samples the namespace's pods, their logs and the token's holders until stopped."""

    def __init__(self, cluster: TestCluster, observed: Observed) -> None:
        self.client = cluster.api_client()
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.observed = observed
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        needle = f"HF_TOKEN={self.observed.token}".encode()
        while not self.stopping.wait(1.0):
            self.observed.holders |= _holders(needle)
            self.sample()

    def sample(self) -> None:
        for pod in self.core.list_namespaced_pod(self.observed.namespace).items:
            self.observed.pods[pod.metadata.uid] = self.client.sanitize_for_serialization(pod)
            for container in pod.spec.containers:
                try:
                    log = self.core.read_namespaced_pod_log(
                        pod.metadata.name, pod.metadata.namespace, container=container.name
                    )
                except ApiException:
                    continue  # not started yet, or gone
                self.observed.logs[f"{pod.metadata.name}/{container.name}"] = log

    def __enter__(self) -> "Watcher":
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.sample()  # the kept workers' and Jobs' whole logs


def _document() -> dict[str, Any]:
    document = article_002_document(NAME, [2], trials=1)
    spec = document["spec"]
    spec["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU,
                        "simulation": {"profile": "qwen3-0.6b-24gb"}}]  # fmt: skip
    spec["workload"]["promptFormat"] = "text"
    spec["routing"] = [
        {"name": "cache-aware", "router": {"policy": "cache_aware", "resources": CPU_NODE_SHARE}}
    ]
    spec["engine"]["hubTokenSecret"] = {"name": SECRET, "key": KEY}
    spec["cleanup"] = {"keepJobs": True, "keepWorkers": True}
    return document


def _readable(data: bytes) -> str:
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode(errors="replace")


def _fetched(cluster: TestCluster, namespace: str, out: Path) -> dict[str, str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        [sys.executable, "-m", "kvbench", "fetch", f"bx/{NAME}", "-n", namespace, "--out",
         str(out)], capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = {f"fetch:{p.relative_to(out)}": _readable(p.read_bytes()) for p in out.rglob("*")
             if p.is_file()}  # fmt: skip
    return {"fetch output": done.stdout + done.stderr, **files}


def _configmaps(core: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, str]:
    """Each ConfigMap as JSON, and its binary data decoded (a result part alone is a piece of
    a gzip stream: the whole documents are checked in `kvbench fetch`'s output)."""
    texts = {}
    for item in core.list_namespaced_config_map(namespace).items:
        binary = b"".join(base64.b64decode(v) for v in (item.binary_data or {}).values())
        texts[f"configmap {item.metadata.name}"] = json.dumps(
            core.api_client.sanitize_for_serialization(item)
        ) + binary.decode(errors="replace")
    return texts


def _after(cluster: TestCluster, observed: Observed, operator: dict, tmp: Path) -> None:
    client = cluster.api_client()
    core = kubernetes.client.CoreV1Api(client)
    apps = kubernetes.client.AppsV1Api(client)
    batch = kubernetes.client.BatchV1Api(client)
    namespace, system = observed.namespace, operator["metadata"]["namespace"]
    logs = cluster.kubectl("logs", "-n", system, f"deployment/{operator['metadata']['name']}")
    assert logs.returncode == 0 and logs.stdout, logs.stderr
    dump = client.sanitize_for_serialization
    observed.texts = {
        "operator log": logs.stdout,
        **{f"log {name}": text for name, text in observed.logs.items()},
        "events": json.dumps([dump(e) for ns in (namespace, system)
                              for e in core.list_namespaced_event(ns).items]),
        "experiment": json.dumps(get(cluster, namespace, NAME)),
        "pods": json.dumps(list(observed.pods.values())),
        "workloads": json.dumps([dump(o) for o in [
            *apps.list_namespaced_stateful_set(namespace).items,
            *apps.list_namespaced_deployment(namespace).items,
            *batch.list_namespaced_job(namespace).items,
        ]]),
        **_configmaps(core, namespace),
        **_fetched(cluster, namespace, tmp / "fetched"),
    }  # fmt: skip


@pytest.fixture(scope="module")
def observed(
    cluster: TestCluster, operator: dict, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    namespace = f"t-secrets-{secrets.token_hex(3)}"
    cluster.ensure_namespace(namespace)
    token = f"hf_kvbenchTEST{secrets.token_urlsafe(24)}"
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": SECRET}, "stringData": {KEY: token}}
    )
    seen = Observed(token=token, namespace=namespace)
    with Watcher(cluster, seen):
        apply(cluster, namespace, _document())
        body = wait_phase(cluster, namespace, NAME, {"Succeeded", "Failed"}, 600)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    _after(cluster, seen, operator, tmp_path_factory.mktemp("secrets"))
    yield seen
    core.delete_namespace(namespace)


def _component(pod: dict[str, Any]) -> str:
    labels = pod["metadata"].get("labels") or {}
    return labels.get(LABEL_COMPONENT) or labels["app.kubernetes.io/component"]


def test_the_token_reaches_the_workers_and_no_other_pod(observed: Observed) -> None:
    workers = {p["metadata"]["name"] for p in observed.pods.values() if _component(p) == "worker"}
    assert len(workers) == 2
    assert observed.holders == workers


def test_the_token_appears_in_no_log_event_status_record_or_result(observed: Observed) -> None:
    texts = observed.texts
    for source in ("operator log", "events", "experiment", "fetch output"):
        assert texts[source], f"{source} is empty: nothing was checked"
    components = {_component(p) for p in observed.pods.values()}
    assert components == {"worker", "router", "loadgen"}
    for pod in observed.pods.values():
        name = pod["metadata"]["name"]
        assert texts.get(f"log {name}/{pod['spec']['containers'][0]['name']}"), f"no log of {name}"
    encoded = base64.b64encode(observed.token.encode()).decode()
    leaks = [source for source, text in texts.items() if observed.token in text or encoded in text]
    assert leaks == [], f"the token appears in {leaks}"


def test_the_operator_may_not_read_secrets(
    cluster: TestCluster, observed: Observed, operator: dict
) -> None:
    account = operator["spec"]["template"]["spec"]["serviceAccountName"]
    user = f"system:serviceaccount:{operator['metadata']['namespace']}:{account}"
    scopes = (["-n", observed.namespace], ["--all-namespaces"])
    for verb in ("get", "list", "watch"):
        for what, scope in [("secrets", s) for s in scopes] + [
            (f"secrets/{SECRET}", ["-n", observed.namespace])
        ]:
            answer = cluster.kubectl("auth", "can-i", verb, what, f"--as={user}", *scope)
            assert answer.stdout.strip() == "no", f"the operator may {verb} {what} {scope}"


def test_every_pod_that_ran_passes_the_restricted_profile(
    cluster: TestCluster, observed: Observed, operator: dict
) -> None:
    client = cluster.api_client()
    labels = operator["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    own = kubernetes.client.CoreV1Api(client).list_namespaced_pod(
        operator["metadata"]["namespace"], label_selector=selector
    )
    pods = [*observed.pods.values(), *(client.sanitize_for_serialization(p) for p in own.items)]
    found: dict[str, set[bool]] = {}
    for pod in pods:
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
        tokens = [v for v in pod["spec"].get("volumes", []) if "secret" in v or "projected" in v]
        assert bool(tokens) == (_component(pod) in ("loadgen", "operator")), "API access"
        for container in pod["spec"]["containers"]:
            root = container["securityContext"].get("readOnlyRootFilesystem", False)
            found.setdefault(_component(pod), set()).add(root)
    assert found == {component: {value} for component, value in READ_ONLY_ROOT.items()}
    print(f"restricted Pod Security Standard: {len(pods)} pods that ran, all pass")
