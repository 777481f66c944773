"""The kvbench-operator chart: rendered with Helm's engine, valid, least-privilege RBAC."""

import copy
from collections import defaultdict
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from kvbench import __version__
from kvbench.api.crd import crd_yaml
from kvbench.kube.chart import CHART_DIR, lint_chart, lint_manifests, render_chart
from kvbench.kube.validation import schema_versions
from kvbench.operator.experiments import IMAGE_ENV

ROOT = Path(__file__).resolve().parents[3]
RECENT = [v for v in schema_versions() if tuple(map(int, v.split("."))) >= (1, 30)]
NAMESPACE = "kvbench-system"
ACCOUNT = {"kind": "ServiceAccount", "name": "kvbench-operator", "namespace": NAMESPACE}
CLUSTER = "(cluster)"
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}

MODES = {
    "default": None,
    "namespaces": {"watch": {"namespaces": ["a", "b"]}},
    "all-namespaces": {"watch": {"allNamespaces": True}},
}

# What the operator may do where it runs experiments (docs/operator.md says why), written out
# here apart from the chart so that a widened rule fails.
WORKLOADS = {
    ("kvbench.io", "benchmarkexperiments"): {"get", "list", "watch", "patch", "update"},
    ("kvbench.io", "benchmarkexperiments/status"): {"get", "patch", "update"},
    ("kvbench.io", "benchmarkexperiments/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "delete"},
    ("", "pods/log"): {"get"},
    ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
    ("apps", "statefulsets"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("", "serviceaccounts"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "list", "create", "patch", "delete"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
CLUSTER_READS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("", "nodes"): {"get", "list"},
}
NAMESPACES = {("", "namespaces"): {"list", "watch"}}  # kopf's scan, given namespaces
# Given namespaces: experiments elsewhere are read, and told once that they are not run.
NOT_WATCHED = {
    ("kvbench.io", "benchmarkexperiments"): {"list", "watch"},
    ("kvbench.io", "benchmarkexperiments/status"): {"patch"},
    ("", "events"): {"create"},
}
# kube-proxy's mode (how a Service arm balanced): its one ConfigMap, by name, in every mode.
KUBE_PROXY = {("kube-system", "", "configmaps", "kube-proxy"): {"get"}}


def _scoped(scope: str, rules: dict[tuple[str, str], set[str]]) -> dict[tuple, set[str]]:
    return {(scope, group, resource): verbs for (group, resource), verbs in rules.items()}


EXPECTED_PERMISSIONS = {
    "default": (
        _scoped(NAMESPACE, WORKLOADS)
        | _scoped(CLUSTER, CLUSTER_READS | NAMESPACES | NOT_WATCHED)
        | KUBE_PROXY
    ),
    "namespaces": (
        _scoped("a", WORKLOADS)
        | _scoped("b", WORKLOADS)
        | _scoped(CLUSTER, CLUSTER_READS | NAMESPACES | NOT_WATCHED)
        | KUBE_PROXY
    ),
    "all-namespaces": _scoped(CLUSTER, WORKLOADS | CLUSTER_READS) | KUBE_PROXY,
}
ENDPOINTS = ["--liveness", "http://$(POD_IP):8080/healthz", "--metrics", "$(POD_IP):9090"]
EXPECTED_ARGS = {
    "default": ["--namespace", NAMESPACE, *ENDPOINTS],
    "namespaces": ["--namespace", "a", "--namespace", "b", *ENDPOINTS],
    "all-namespaces": ["--all-namespaces", *ENDPOINTS],
}
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {mode: render_chart(values) for mode, values in MODES.items()}


def _one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [manifest] = [m for m in manifests if m["kind"] == kind]
    return manifest


def _permissions(manifests: list[dict[str, Any]]) -> dict[tuple, set[str]]:
    """(namespace or CLUSTER, apiGroup, resource[, resource name]) -> the verbs the operator's
    account holds, following every binding to its role; every role must be bound, to that
    account only."""
    roles = {
        (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
    }
    granted: dict[tuple, set[str]] = defaultdict(set)
    bound = set()
    for binding in (m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [ACCOUNT], binding["metadata"]["name"]
        cluster_wide = binding["kind"] == "ClusterRoleBinding"
        namespace = None if cluster_wide else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        key = (ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])
        bound.add(key)
        for rule in roles[key]["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "resourceNames", "verbs"}, rule
            names = [(name,) for name in rule.get("resourceNames", [])] or [()]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for name in names:
                        where = (namespace or CLUSTER, group, resource, *name)
                        granted[where] |= set(rule["verbs"])
    assert bound == set(roles), "a rendered role that nothing binds"
    return dict(granted)


@pytest.mark.parametrize("mode", MODES)
def test_the_operator_holds_exactly_the_permissions_it_needs(rendered, mode: str) -> None:
    assert _permissions(rendered[mode]) == EXPECTED_PERMISSIONS[mode]


@pytest.mark.parametrize("mode", MODES)
def test_no_rule_uses_a_wildcard(rendered, mode: str) -> None:
    for role in (m for m in rendered[mode] if m["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: {rule}"


def test_only_all_namespaces_gets_a_cluster_role_beyond_cluster_reads(rendered) -> None:
    for mode in ("default", "namespaces"):
        cluster_roles = [m for m in rendered[mode] if m["kind"] == "ClusterRole"]
        assert [rule for role in cluster_roles for rule in role["rules"]] == [
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["kvbench.io"],
                "resources": ["benchmarkexperiments"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["kvbench.io"],
                "resources": ["benchmarkexperiments/status"],
                "verbs": ["patch"],
            },
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ]
    roles = [m["metadata"]["namespace"] for m in rendered["namespaces"] if m["kind"] == "Role"]
    assert roles == ["kube-system", "a", "b"]
    namespaced = [m for m in rendered["all-namespaces"] if m["kind"] in ("Role", "RoleBinding")]
    assert [(m["kind"], m["metadata"]["namespace"]) for m in namespaced] == [
        ("Role", "kube-system"),
        ("RoleBinding", "kube-system"),
    ], "only kube-proxy's ConfigMap"


@pytest.mark.parametrize("version", RECENT)
@pytest.mark.parametrize("mode", MODES)
def test_the_chart_lints_clean(mode: str, version: str) -> None:
    """helm lint, then every manifest valid for Kubernetes 1.30+, labelled, and non-root."""
    assert lint_chart(MODES[mode], version=version) == []


@pytest.mark.parametrize("mode", MODES)
def test_the_operator_watches_what_its_rbac_allows(rendered, mode: str) -> None:
    [container] = _one(rendered[mode], "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kvbench", "operator"]
    assert container["args"] == EXPECTED_ARGS[mode]


def test_watching_all_and_listed_namespaces_at_once_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="not both"):
        render_chart({"watch": {"allNamespaces": True, "namespaces": ["a"]}})


def test_a_misspelled_value_is_refused() -> None:
    with pytest.raises(helm_python.HelmValuesError, match="allNamespace"):
        render_chart({"watch": {"allNamespace": True}})
    problems = lint_chart({"watch": {"allNamespace": True}})
    assert problems and all(p.startswith("helm lint: ") for p in problems)
    assert "additional properties 'allNamespace' not allowed" in problems[0]


def test_the_deployment_runs_the_operator_image_locked_down(rendered) -> None:
    deployment = _one(rendered["default"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__, "the image tag follows the package version"
    assert container["image"] == f"ghcr.io/kvbench/kvbench:{__version__}"
    assert container["env"] == [POD_IP, {"name": IMAGE_ENV, "value": container["image"]}]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["serviceAccountName"] == ACCOUNT["name"]
    assert _one(rendered["default"], "ServiceAccount")["metadata"]["name"] == ACCOUNT["name"]
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    probe = {"httpGet": {"path": "/healthz", "port": "health"}}
    assert container["livenessProbe"].items() >= probe.items()
    assert container["readinessProbe"].items() >= probe.items()
    assert container["ports"] == [
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_image_and_resources_come_from_values() -> None:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    values = {"image": {"repository": "registry.example/kvbench", "tag": "dev"}}
    deployment = _one(render_chart(values | {"resources": resources}), "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/kvbench:dev"
    assert container["env"] == [
        POD_IP,
        {"name": IMAGE_ENV, "value": "registry.example/kvbench:dev"},
    ]
    assert container["resources"] == resources


@pytest.mark.parametrize("mode", MODES)
def test_objects_come_in_install_order(rendered, mode: str) -> None:
    """The CRD first, the account and its roles before the Deployment whose pods use them."""
    kinds = [m["kind"] for m in rendered[mode]]
    assert kinds[0] == "CustomResourceDefinition"
    assert kinds[-1] == "Deployment"
    assert kinds.index("ServiceAccount") < min(i for i, k in enumerate(kinds) if "Role" in k)


@pytest.mark.parametrize("mode", MODES)
def test_namespaced_objects_name_their_namespace(rendered, mode: str) -> None:
    """A rendered object without one lands wherever `kubectl apply` happens to point."""
    for manifest in rendered[mode]:
        if manifest["kind"] not in CLUSTER_SCOPED:
            assert manifest["metadata"].get("namespace"), manifest["metadata"]["name"]


def test_the_chart_carries_the_generated_crd_not_a_copy(rendered) -> None:
    link = CHART_DIR / "crds" / "benchmarkexperiments.kvbench.io.yaml"
    assert link.is_symlink()
    assert link.resolve() == ROOT / "crds" / "benchmarkexperiments.kvbench.io.yaml"
    [crd] = [m for m in rendered["default"] if m["kind"] == "CustomResourceDefinition"]
    assert crd == yaml.safe_load(crd_yaml())


def test_lint_finds_missing_labels_and_schema_errors(rendered) -> None:
    deployment = copy.deepcopy(_one(rendered["default"], "Deployment"))
    del deployment["metadata"]["labels"]["app.kubernetes.io/version"]
    deployment["spec"]["replicas"] = "one"
    problems = lint_manifests([deployment])
    assert len(problems) == 2, problems
    assert problems[0].startswith("Deployment/kvbench-operator: spec.replicas: 'one'")
    assert problems[1] == "Deployment/kvbench-operator: missing labels app.kubernetes.io/version"


@pytest.mark.parametrize(
    ("pod_context", "container_context", "root"),
    [
        ({"runAsUser": 0}, {}, True),
        ({"runAsUser": 10001}, {"runAsUser": 0}, True),
        ({}, {}, True),  # the image's USER decides, and may be root
        ({"runAsNonRoot": True}, {}, False),  # the kubelet refuses a root image
        ({}, {"runAsUser": 10001}, False),
    ],
)
def test_lint_finds_containers_that_may_run_as_root(
    rendered, pod_context: dict, container_context: dict, root: bool
) -> None:
    deployment = copy.deepcopy(_one(rendered["default"], "Deployment"))
    pod = deployment["spec"]["template"]["spec"]
    pod["securityContext"] = pod_context
    pod["containers"][0]["securityContext"] = container_context
    pod["initContainers"] = [
        {"name": "init", "image": "busybox", "securityContext": dict(container_context)}
    ]
    expected = [
        f"Deployment/kvbench-operator: container {name} may run as root"
        for name in ("init", "operator")
    ]
    assert lint_manifests([deployment]) == (expected if root else [])
