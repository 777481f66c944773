"""Render and lint the kvbench-operator Helm chart without a helm binary.

helm-python-sdk binds (ctypes) to libhelm_c, Helm v4's Go SDK built as a shared library that
its wheel ships, so templates render with Helm's own engine, offline: no cluster is contacted
and `lookup` finds nothing. A test-time tool: helm-python-sdk is a `test` dependency, and the
chart is read from the repository (`charts/`, beside `crds/`), not from the installed package.
"""

import json
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native

from kvbench.kube.validation import DEFAULT_VERSION, validate_manifest

__all__ = ["CHART_DIR", "STANDARD_LABELS", "lint_chart", "lint_manifests", "render_chart"]

CHART_DIR = Path(__file__).resolve().parents[3] / "charts" / "kvbench-operator"

STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)

_INSTALL_ORDER = (
    "CustomResourceDefinition",
    "ServiceAccount",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
)
"""Helm's install order (releaseutil.InstallOrder) for the kinds this chart has; others last."""

_WARNING = 2
"""helm lint's severities: 1 info, 2 warning, 3 error."""

_POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def render_chart(
    values: dict[str, Any] | None = None,
    namespace: str = "kvbench-system",
    release: str = "kvbench",
    api_versions: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """What `helm install -n NAMESPACE RELEASE` would apply, in the order it would, so that
    `kubectl apply -f` of the list works too, on a cluster that also serves `api_versions`
    (`helm template --api-versions`, e.g. `monitoring.coreos.com/v1/ServiceMonitor`).

    The CRDs of `crds/` come verbatim (Helm never templates them). Values are checked against
    values.schema.json; a bad value raises `helm_python.HelmValuesError`, a `fail` in a
    template `helm_python.HelmRenderError`.
    """
    with helm_python.Chart.load(CHART_DIR) as chart:
        crds = [crd["data"] for crd in chart.crds]
        if api_versions:
            # libhelm_c's render takes api_versions; helm-python-sdk 0.2.2's wrapper does not
            # pass them on, so this one call goes to the library as the wrapper would.
            opts = {
                "name": release, "namespace": namespace, "is_install": True,
                "api_versions": list(api_versions),
            }  # fmt: skip
            rendered = json.loads(
                _native.call_string("helm_render", chart._raw(), json.dumps(values or {}),
                                    json.dumps(opts))
            )  # fmt: skip
        else:
            rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    templates = [rendered[path] for path in sorted(rendered) if not path.endswith("/NOTES.txt")]
    manifests = [doc for text in [*crds, *templates] for doc in yaml.safe_load_all(text) if doc]
    return sorted(manifests, key=_install_rank)


def _install_rank(manifest: dict[str, Any]) -> int:
    kind = manifest["kind"]
    return _INSTALL_ORDER.index(kind) if kind in _INSTALL_ORDER else len(_INSTALL_ORDER)


def _name(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def _missing_labels(manifest: dict[str, Any]) -> list[str]:
    """Standard labels the manifest lacks; crds/ is not templated, so Helm cannot label it."""
    if manifest["kind"] == "CustomResourceDefinition":
        return []
    labels = manifest["metadata"].get("labels") or {}
    missing = [label for label in STANDARD_LABELS if label not in labels]
    return [f"{_name(manifest)}: missing labels {', '.join(missing)}"] if missing else []


def _root_containers(manifest: dict[str, Any]) -> list[str]:
    """Containers that run as root, or as whatever user their image says (maybe root)."""
    path = _POD_SPEC_PATHS.get(manifest["kind"])
    if path is None:
        return []
    pod: dict[str, Any] = manifest
    for key in path:
        pod = pod.get(key, {})
    pod_context = pod.get("securityContext") or {}
    problems = []
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        context = {**pod_context, **(container.get("securityContext") or {})}
        user = context.get("runAsUser")
        if user == 0 or (user is None and not context.get("runAsNonRoot")):
            problems.append(f"{_name(manifest)}: container {container['name']} may run as root")
    return problems


def lint_manifests(manifests: list[dict[str, Any]], version: str = DEFAULT_VERSION) -> list[str]:
    """What is wrong with rendered manifests: schema errors for Kubernetes `version`, missing
    standard labels, containers that may run as root. Empty when all is well."""
    problems = []
    for manifest in manifests:
        problems += validate_manifest(manifest, version)
        problems += _missing_labels(manifest)
        problems += _root_containers(manifest)
    return problems


def lint_chart(
    values: dict[str, Any] | None = None,
    namespace: str = "kvbench-system",
    release: str = "kvbench",
    version: str = DEFAULT_VERSION,
) -> list[str]:
    """`helm lint`'s warnings and errors for the chart, then `lint_manifests` of its render
    (unless Helm found errors: a chart that does not render has nothing more to check)."""
    report = helm_python.lint(
        CHART_DIR, values, strict=True, namespace=namespace, kube_version=f"v{version}"
    )
    problems = [
        f"helm lint: {message['path']}: {message['error'].strip()}"
        for message in report["messages"]
        if message["severity"] >= _WARNING
    ]
    if any(message["severity"] > _WARNING for message in report["messages"]):
        return problems
    return problems + lint_manifests(render_chart(values, namespace, release), version)
