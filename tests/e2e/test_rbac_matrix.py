"""Least privilege, asked of the API server as a full matrix: every verb on every resource the
cluster serves, in watched and unwatched namespaces, kube-system and cluster-wide, for the
operator's account (the chart with `watch.allNamespaces` and with a namespace list) and for a
load generator's per-run account (the objects the operator makes, created as the operator).
What is allowed must be exactly what the operator needs (test_rbac.NEEDED, written out
independently of the chart, plus `get` on kube-proxy's ConfigMap by name and, given
namespaces, the NotWatched notice everywhere) or, for the load generator, get/update/patch on
its own result ConfigMaps by name; everything else must be refused."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e_helpers import apply, experiment_document, get
from test_rbac import BUILTIN, NEEDED

from kvbench.api import parse_experiment
from kvbench.kube.chart import render_chart
from kvbench.kube.manifests import ExperimentRef, load_objects
from kvbench.kube.results import result_configmap_names
from kvbench.loadgen.config import RunConfig, UrlTarget
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames
from kvbench.testing.cluster import TestCluster

pytestmark = pytest.mark.slow

VERBS = (
    "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
    "escalate", "bind", "impersonate",
)  # fmt: skip
WATCHED, OTHER_WATCHED, UNWATCHED = "rbac-a", "rbac-b", "rbac-c"
EVERYONE = {("create", resource) for resource in BUILTIN}
"""Granted to every authenticated account by Kubernetes itself (system:basic-user)."""
UNSERVED = {
    ("kvbench.io", "benchmarkexperiments/finalizers", True),
    ("", "users", False),
    ("", "groups", False),
}
"""Authorized but never listed by discovery: the finalizers OwnerReferencesPermissionEnforcement
asks about, and what `impersonate` applies to."""
LOADGEN_VERBS = {"get", "update", "patch"}
NOT_WATCHED = {
    ("list", "benchmarkexperiments.kvbench.io"),
    ("watch", "benchmarkexperiments.kvbench.io"),
    ("patch", "benchmarkexperiments.kvbench.io/status"),
    ("create", "events"),
}
"""Given namespaces, the operator reads experiments everywhere and tells one outside them that
it is not run (a condition and an Event)."""
KUBE_PROXY = ("kube-system", "kube-proxy")
"""kube-proxy's ConfigMap, whose `mode` says how a Service arm balanced: `get`, by name."""


@dataclass(frozen=True)
class Resource:
    group: str
    name: str
    """`pods` or `pods/log`."""
    namespaced: bool

    @property
    def key(self) -> str:
        """`pods/log`, `deployments.apps`, `benchmarkexperiments.kvbench.io/status`."""
        resource, _, sub = self.name.partition("/")
        dotted = f"{resource}.{self.group}" if self.group else resource
        return f"{dotted}/{sub}" if sub else dotted


@dataclass(frozen=True)
class Check:
    verb: str
    resource: Resource
    namespace: str
    """Empty: cluster-wide (for a namespaced resource, across every namespace)."""
    name: str = ""


@dataclass(frozen=True)
class Subject:
    namespace: str
    name: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> list[str]:
        """What the API server's token authenticator gives a service account."""
        return ["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}",
                "system:authenticated"]  # fmt: skip


def _client(cluster: TestCluster) -> httpx.Client:
    access = cluster.access
    return httpx.Client(
        base_url=access.server, verify=access.ssl_context(), headers=access.headers(), timeout=30
    )


def _discover(client: httpx.Client) -> list[Resource]:
    """Every resource and subresource the API server serves, in each group's preferred
    version (RBAC ignores versions)."""
    versions = [("", "/api/v1")]
    for group in client.get("/apis").json()["groups"]:
        versions.append((group["name"], f"/apis/{group['preferredVersion']['groupVersion']}"))
    found = {
        Resource(group, r["name"], r["namespaced"])
        for group, path in versions
        for r in client.get(path).json()["resources"]
    }
    return sorted(found | {Resource(*u) for u in UNSERVED}, key=lambda r: (r.key, r.namespaced))


def _matrix(resources: list[Resource], namespaces: list[str]) -> list[Check]:
    return [
        Check(verb, resource, namespace)
        for resource in resources
        for namespace in (["", *namespaces] if resource.namespaced else [""])
        for verb in VERBS
    ]


def _ask(client: httpx.Client, subject: Subject, checks: list[Check]) -> dict[Check, bool]:
    """The API server's answer to each check (a SubjectAccessReview: its real authorizer)."""

    def review(check: Check) -> bool:
        group = check.resource.group
        resource, _, sub = check.resource.name.partition("/")
        attributes = {
            "verb": check.verb,
            "group": group,
            "resource": resource,
            "subresource": sub,
            "namespace": check.namespace,
            "name": check.name,
        }
        body = {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": subject.user, "groups": subject.groups,
                     "resourceAttributes": attributes},
        }  # fmt: skip
        answer = client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=body)
        answer.raise_for_status()
        return bool(answer.json()["status"].get("allowed"))

    with ThreadPoolExecutor(8) as pool:
        return dict(zip(checks, pool.map(review, checks), strict=True))


def _compare(what: str, answers: dict[Check, bool], expected: dict[Check, bool]) -> tuple[int, int]:
    wrong = [
        f"{'allowed' if answers[c] else 'refused'}: {c.verb} {c.resource.key} "
        f"ns={c.namespace or '*'}{' name=' + c.name if c.name else ''}"
        for c in answers
        if answers[c] != expected[c]
    ]
    allowed = sum(answers.values())
    print(f"{what}: {len(answers)} checks, {allowed} allowed, {len(answers) - allowed} refused")
    assert wrong == [], f"{what}: {len(wrong)} answers differ from the need:\n" + "\n".join(
        wrong[:40]
    )
    return allowed, len(answers) - allowed


def _operator_expects(check: Check, watched: set[str] | None, extra: set[tuple[str, str]]) -> bool:
    """What the operator needs: NEEDED in every watched namespace (all, when `watched` is
    None, and then also cluster-wide), its cluster-scoped entries cluster-wide, plus `extra`
    cluster-wide (verb, resource key) pairs."""
    key = check.resource.key
    if (check.verb, key) in EVERYONE | extra:
        return True
    if (check.verb, key, check.namespace, check.name) == ("get", "configmaps", *KUBE_PROXY):
        return True
    if check.verb not in NEEDED.get(key, set()):
        return False
    if not check.resource.namespaced:
        return True
    return watched is None or check.namespace in watched


def _named(resources: list[Resource]) -> list[Check]:
    """Every verb on kube-proxy's ConfigMap and on another one of kube-system, by name."""
    configmaps = next(r for r in resources if r.key == "configmaps")
    names = (KUBE_PROXY[1], "coredns")
    return [Check(verb, configmaps, KUBE_PROXY[0], name) for name in names for verb in VERBS]


def _apply(cluster: TestCluster, manifests: list[dict[str, Any]], name: str, *args: str) -> Path:
    path = Path(cluster.workdir) / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    applied = cluster.kubectl("apply", "-f", str(path), *args)
    assert applied.returncode == 0, applied.stderr
    return path


def _chart_rbac(release: str, values: dict[str, Any]) -> tuple[Subject, list[dict[str, Any]]]:
    """The chart's ServiceAccount and RBAC objects (not its Deployment: the account is what
    is asked about), under `release` in its own namespace."""
    namespace = f"{release}-system"
    manifests = render_chart(values, namespace=namespace, release=release)
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    rbac = [m for m in manifests if m["kind"] in kinds]
    account = next(m for m in rbac if m["kind"] == "ServiceAccount")["metadata"]["name"]
    return Subject(namespace, account), rbac


@pytest.fixture(scope="module")
def rbac_cluster(cluster: TestCluster, experiment_crd: str) -> Iterator[dict[str, Any]]:
    """Both chart modes' RBAC applied, and a run's load generator objects created by the
    namespace-list operator's own account (which must be allowed to: the RBAC escalation
    check), owned by a real experiment that no operator handles."""
    everything = {
        "all": _chart_rbac("rbac-all", {"watch": {"allNamespaces": True}}),
        "list": _chart_rbac("rbac-list", {"watch": {"namespaces": [WATCHED, OTHER_WATCHED]}}),
    }
    namespaces = [WATCHED, OTHER_WATCHED, UNWATCHED, *(s.namespace for s, _ in everything.values())]
    for namespace in namespaces:
        cluster.ensure_namespace(namespace)
    paths = [_apply(cluster, objects, f"rbac-{mode}") for mode, (_, objects) in everything.items()]

    document = experiment_document("prefix-cache-service.yaml", "matrix")
    apply(cluster, WATCHED, document)
    experiment = parse_experiment(document)
    run = plan_experiment(experiment).runs[0]
    names = ChildNames(experiment="matrix", index=run.index, attempt=1)
    config = RunConfig(
        model=experiment.spec.engine.model, target=UrlTarget(url="http://svc:8000"),
        workload=experiment.spec.workload, point=run.point, seed=run.seed,
    )  # fmt: skip
    uid = get(cluster, WATCHED, "matrix")["metadata"]["uid"]
    ref = ExperimentRef(name="matrix", namespace=WATCHED, uid=uid)
    results = result_configmap_names(names.prefix)
    objects = load_objects(ref, names, config, results)
    operator = everything["list"][0]
    paths.append(_apply(cluster, objects, "rbac-loadgen", f"--as={operator.user}"))
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    yield {
        "all": everything["all"][0],
        "list": operator,
        "loadgen": Subject(WATCHED, account),
        "results": results,
        "others": [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"
                   and o["metadata"]["name"] not in results],
    }  # fmt: skip
    for path in reversed(paths):
        cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=false")
    for namespace in namespaces:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_the_operator_watching_all_namespaces_may_do_exactly_what_it_needs(
    cluster: TestCluster, rbac_cluster: dict[str, Any]
) -> None:
    with _client(cluster) as client:
        resources = _discover(client)
        checks = _matrix(resources, [WATCHED, "kube-system"]) + _named(resources)
        answers = _ask(client, rbac_cluster["all"], checks)
    expected = {c: _operator_expects(c, None, set()) for c in checks}
    _compare("operator (allNamespaces)", answers, expected)
    secrets = [c for c in checks if c.resource.key == "secrets"]
    assert secrets and not any(answers[c] for c in secrets), "no Secret, anywhere"


def test_the_operator_watching_a_list_may_do_it_there_only(
    cluster: TestCluster, rbac_cluster: dict[str, Any]
) -> None:
    subject = rbac_cluster["list"]
    namespaces = [WATCHED, OTHER_WATCHED, UNWATCHED, subject.namespace, "kube-system"]
    with _client(cluster) as client:
        resources = _discover(client)
        checks = _matrix(resources, namespaces) + _named(resources)
        answers = _ask(client, subject, checks)
    # kopf lists and watches namespaces to serve those that match the list.
    scan = {("list", "namespaces"), ("watch", "namespaces")}
    extra = scan | NOT_WATCHED
    expected = {c: _operator_expects(c, {WATCHED, OTHER_WATCHED}, extra) for c in checks}
    _compare("operator (namespace list)", answers, expected)
    unwatched = [
        c for c in checks
        if c.namespace in (UNWATCHED, "kube-system") and answers[c]
        and (c.verb, c.resource.key) not in NOT_WATCHED and (c.namespace, c.name) != KUBE_PROXY
    ]  # fmt: skip
    assert unwatched == [], "nothing namespaced outside the list but the notice and kube-proxy's"


def test_the_load_generator_may_write_its_own_results_and_nothing_else(
    cluster: TestCluster, rbac_cluster: dict[str, Any]
) -> None:
    results, others = rbac_cluster["results"], rbac_cluster["others"]
    with _client(cluster) as client:
        resources = _discover(client)
        checks = _matrix(resources, [WATCHED, OTHER_WATCHED, "kube-system"])
        configmaps = next(r for r in resources if r.key == "configmaps")
        checks += [
            Check(verb, configmaps, namespace, name)
            for namespace in ("", WATCHED, OTHER_WATCHED)
            for name in [*results, *others, "unrelated"]
            for verb in VERBS
        ]
        answers = _ask(client, rbac_cluster["loadgen"], checks)

    def needed(check: Check) -> bool:
        own = check.namespace == WATCHED and check.name in results
        return (check.verb, check.resource.key) in EVERYONE or (
            own and check.resource.key == "configmaps" and check.verb in LOADGEN_VERBS
        )

    _compare("load generator", answers, {c: needed(c) for c in checks})
    assert sum(answers.values()) == len(EVERYONE) + len(results) * len(LOADGEN_VERBS)


def test_the_operator_cannot_grant_what_it_does_not_hold(
    cluster: TestCluster, rbac_cluster: dict[str, Any]
) -> None:
    """The load generator's Role was created as the operator (the fixture); one that would
    read Secrets is refused by the RBAC escalation check, since the operator has none."""
    widened = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "matrix-widened", "namespace": WATCHED},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }  # fmt: skip
    path = Path(cluster.workdir) / "rbac-widened.yaml"
    path.write_text(yaml.safe_dump(widened))
    refused = cluster.kubectl("create", "-f", str(path), f"--as={rbac_cluster['list'].user}")
    assert refused.returncode != 0
    assert "attempting to grant RBAC permissions not currently held" in refused.stderr
