"""Service URLs end in the cluster's own DNS domain, not a hard-coded cluster.local: the
operator setting (the chart's `clusterDomain`), else what the kubelet wrote into the
operator pod's resolv.conf, else cluster.local."""

from pathlib import Path

import helm_python
import pytest

from kvbench.kube.chart import render_chart
from kvbench.kube.manifests import ExperimentRef
from kvbench.kube.manifests.common import CLUSTER_DOMAIN_ENV, cluster_domain

UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
KUBELET_RESOLV = """\
search bench.svc.k8s.example.org svc.k8s.example.org k8s.example.org
nameserver 10.96.0.10
options ndots:5
"""


@pytest.fixture(autouse=True)
def _no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLUSTER_DOMAIN_ENV, raising=False)


def test_the_domain_comes_from_the_pods_search_list(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(KUBELET_RESOLV)
    assert cluster_domain(resolv) == "k8s.example.org"
    resolv.write_text("search svc.svc.cluster.local svc.cluster.local cluster.local\n")
    assert cluster_domain(resolv) == "cluster.local", "a namespace named svc"


def test_outside_a_pod_it_is_cluster_local(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search corp.example.com\nnameserver 1.1.1.1\n")
    assert cluster_domain(resolv) == "cluster.local"
    assert cluster_domain(tmp_path / "missing") == "cluster.local"


def test_the_operator_setting_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(KUBELET_RESOLV)
    monkeypatch.setenv(CLUSTER_DOMAIN_ENV, "prod.internal.")
    assert cluster_domain(resolv) == "prod.internal"
    ref = ExperimentRef(name="bx", namespace="bench", uid=UID)
    assert ref.service_host(ref.service) == "bx-svc.bench.svc.prod.internal"


def _operator_env(values: dict) -> dict[str, str]:
    (deployment,) = [m for m in render_chart(values) if m["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_chart_passes_cluster_domain_to_the_operator() -> None:
    assert _operator_env({"clusterDomain": "k8s.example.org"})[CLUSTER_DOMAIN_ENV] == (
        "k8s.example.org"
    )
    assert CLUSTER_DOMAIN_ENV not in _operator_env({}), "unset: the operator detects it"
    with pytest.raises(helm_python.HelmValuesError, match="clusterDomain"):
        render_chart({"clusterDomain": "Not A Domain"})
