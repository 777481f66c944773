"""The chart's metrics: the Deployment's port and flag, the Service in front of it, the
ServiceMonitor only where its CRD is, the Grafana dashboard's ConfigMap; all valid and lint
clean.

The ServiceMonitor is checked against servicemonitor-v1.schema.json: the openAPIV3Schema of
prometheus-operator v0.93.0's example/prometheus-operator-crd/monitoring.coreos.com_
servicemonitors.yaml (Apache-2.0), descriptions removed, read strictly (an unknown field is an
error, as for `kubectl apply`).
"""

import json
from pathlib import Path
from typing import Any

import helm_python
import pytest
from openapi_schema_validator import OAS30Validator

from kvbench.kube.chart import CHART_DIR, lint_chart, lint_manifests, render_chart
from kvbench.kube.validation import schema_versions

NAMESPACE = "kvbench-system"
SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
RECENT = [v for v in schema_versions() if tuple(map(int, v.split("."))) >= (1, 30)]
MONITORED = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}}
VARIANTS = {
    "metrics-off": {"metrics": {"enabled": False}},
    "other-port": {"metrics": {"port": 9464}},
    "dashboard": {"metrics": {"dashboard": {"enabled": True, "namespace": "monitoring"}}},
    "monitored": MONITORED,
}


def _render_where_installed(values: dict[str, Any], *api_versions: str) -> list[dict[str, Any]]:
    """The chart's templates on a cluster that serves `api_versions`, without the CRDs."""
    return [
        m for m in render_chart(values, NAMESPACE, api_versions=api_versions)
        if m["kind"] != "CustomResourceDefinition"
    ]  # fmt: skip


def _kinds(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def _one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [manifest] = _kinds(manifests, kind)
    return manifest


def _container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = _one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists the known ones."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {k: _strict(v) for k, v in schema.items()}
    if "properties" in strict and "additionalProperties" not in strict:
        strict["additionalProperties"] = False
    return strict


def _service_monitor_problems(manifest: dict[str, Any]) -> list[str]:
    schema = json.loads((Path(__file__).parent / "servicemonitor-v1.schema.json").read_text())
    validator = OAS30Validator(_strict(schema))
    return sorted(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(manifest)
    )


def test_the_operator_serves_metrics_on_its_pod_ip_by_default() -> None:
    manifests = render_chart(namespace=NAMESPACE)
    container = _container(manifests)
    assert container["args"][-2:] == ["--metrics", "$(POD_IP):9090"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    service = _one(manifests, "Service")
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = _one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert not _kinds(manifests, "ServiceMonitor") and not _kinds(manifests, "ConfigMap")


def test_the_port_follows_values_and_may_not_be_the_liveness_port() -> None:
    manifests = render_chart(VARIANTS["other-port"])
    container = _container(manifests)
    assert container["args"][-2:] == ["--metrics", "$(POD_IP):9464"]
    assert [p["containerPort"] for p in container["ports"]] == [8080, 9464]
    assert _one(manifests, "Service")["spec"]["ports"][0]["port"] == 9464
    with pytest.raises(helm_python.HelmRenderError, match="liveness port"):
        render_chart({"metrics": {"port": 8080}})


def test_metrics_off_means_no_flag_port_or_service() -> None:
    manifests = render_chart(VARIANTS["metrics-off"])
    container = _container(manifests)
    assert "--metrics" not in container["args"]
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert not _kinds(manifests, "Service")


@pytest.mark.parametrize(
    ("values", "api_versions", "rendered"),
    [
        (MONITORED, (), False),  # the flag, on a cluster without the CRD
        ({}, (SERVICE_MONITOR,), False),  # the CRD, without the flag
        (MONITORED, (SERVICE_MONITOR,), True),
    ],
)
def test_a_service_monitor_needs_the_flag_and_the_crd(
    values: dict, api_versions: tuple[str, ...], rendered: bool
) -> None:
    manifests = _render_where_installed(values, *api_versions)
    assert len(_kinds(manifests, "ServiceMonitor")) == int(rendered)


def test_the_service_monitor_scrapes_the_metrics_service() -> None:
    manifests = _render_where_installed(MONITORED, SERVICE_MONITOR)
    monitor, service = _one(manifests, "ServiceMonitor"), _one(manifests, "Service")
    assert _service_monitor_problems(monitor) == []
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kps", "for serviceMonitorSelector"
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    [endpoint] = spec["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
    assert endpoint["honorLabels"] is True, "the experiments' namespace label stays"
    others = [m for m in manifests if m["kind"] != "ServiceMonitor"]
    assert lint_manifests(others) == [], "the core kinds beside it stay valid"


def test_the_schema_check_finds_a_wrong_service_monitor() -> None:
    monitor = _one(_render_where_installed(MONITORED, SERVICE_MONITOR), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "half a minute"
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    problems = _service_monitor_problems(monitor)
    assert len(problems) == 2, problems
    assert problems[0].startswith("spec.endpoints.0.interval: 'half a minute' does not match")
    assert problems[1].startswith("spec.endpoints.0: Additional properties")
    assert "'honourLabels' was unexpected" in problems[1]


def test_a_service_monitor_without_metrics_is_refused() -> None:
    values = {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}
    with pytest.raises(helm_python.HelmRenderError, match=r"needs metrics\.enabled"):
        render_chart(values)


def test_the_dashboard_ships_as_a_config_map_for_grafanas_sidecar() -> None:
    manifests = render_chart(VARIANTS["dashboard"], namespace=NAMESPACE)
    config_map = _one(manifests, "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(key, text)] = config_map["data"].items()
    assert key.endswith(".json")
    dashboard = (CHART_DIR / "files" / "grafana-dashboard.json").read_text()
    assert json.loads(text) == json.loads(dashboard)
    in_release = render_chart({"metrics": {"dashboard": {"enabled": True}}}, namespace=NAMESPACE)
    assert _one(in_release, "ConfigMap")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    "values",
    [
        {"metrics": {"serviceMonitor": {"intervall": "30s"}}},
        {"metrics": {"serviceMonitor": {"interval": "30 seconds"}}},
        {"metrics": {"port": 0}},
        {"metrics": {"dashboard": {"labels": {"grafana_dashboard": 1}}}},
    ],
)
def test_bad_metrics_values_are_refused(values: dict) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render_chart(values)


@pytest.mark.parametrize("version", RECENT)
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_chart_lints_clean_with_metrics_values(variant: str, version: str) -> None:
    """helm lint, then every manifest valid for Kubernetes 1.30+, labelled, and non-root."""
    assert lint_chart(VARIANTS[variant], version=version) == []
