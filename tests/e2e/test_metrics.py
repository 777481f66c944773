"""A real Prometheus (Debian's) scrapes the operator the chart installed, at its pod IP and
through its metrics Service, while the operator runs an experiment to Succeeded and fails
another; what Prometheus stored is read back through its HTTP query API, the Grafana
dashboard's own queries included."""

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import kubernetes
import pytest
from e2e_helpers import CPU_NODE_SHARE, apply, experiment_document, wait_phase

from kvbench.api import parse_experiment
from kvbench.kube.chart import CHART_DIR
from kvbench.plan import plan_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.prometheus import PROMETHEUS, running_prometheus
from kvbench.testing.wait import wait_for

GPU = {"nvidia.com/gpu.present": "true"}
WINDOW = "10m"
POD = 'job="operator"'
"""Both jobs scrape the one operator: single out the series of one."""
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed"),
]


def _small(name: str) -> dict[str, Any]:
    """test_operator.py's smallest experiment: one run on two simulated workers."""
    document = experiment_document("prefix-cache-service.yaml", name)
    spec = document["spec"]
    spec["workers"] = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU,
                        "simulation": {"profile": "qwen3-0.6b-24gb"}}]  # fmt: skip
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["load"].update(concurrency=[8], trials=1)
    spec["simulator"] = {"onCluster": True}
    spec["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    return document


def _targets(cluster: TestCluster, operator: dict[str, Any]) -> tuple[str, str]:
    """host:port of the operator pod's metrics, and of its metrics Service."""
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    namespace = operator["metadata"]["namespace"]
    labels = operator["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    [pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    [port] = [p for p in pod.spec.containers[0].ports if p.name == "metrics"]
    service = core.read_namespaced_service(f"{operator['metadata']['name']}-metrics", namespace)
    [service_port] = [p for p in service.spec.ports if p.name == "metrics"]
    return (
        f"{pod.status.pod_ip}:{port.container_port}",
        f"{service.spec.cluster_ip}:{service_port.port}",
    )


@pytest.fixture(scope="module")
def prometheus(
    cluster: TestCluster, operator: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Prometheus in the CPU node's network namespace, as an in-cluster one (the Service's
    address answers only there), scraping the operator every second; yields its URL."""
    pod, service = _targets(cluster, operator)
    scrape = (
        f"  - job_name: operator\n    static_configs:\n      - targets: ['{pod}']\n"
        f"  - job_name: operator-service\n    static_configs:\n      - targets: ['{service}']\n"
    )
    assert cluster.fleet is not None
    node = cluster.fleet.node("cpu-node-0")
    workdir = tmp_path_factory.mktemp("prometheus")
    with running_prometheus(workdir, scrape, node.netns.nsenter(), node.ip) as url:
        wait_for(lambda: _value(url, "min(up)") == 1, 60, "both operator targets up")
        yield url


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _value(url: str, expr: str) -> float | None:
    """The one series' value now, or None while there is none."""
    result = _query(url, expr)
    assert len(result) <= 1, (expr, result)
    return float(result[0]["value"][1]) if result else None


def _dashboard_queries(namespace: str, name: str) -> list[tuple[str, str]]:
    """Every panel's query, with the dashboard's variables set to this experiment."""
    dashboard = json.loads((CHART_DIR / "files" / "grafana-dashboard.json").read_text())
    values = {"$namespace": namespace, "$experiment": name, "$window": WINDOW}
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in values.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            queries.append((f"{panel['title']} {target['refId']}", expr))
    return queries


def test_prometheus_scrapes_an_experiment_to_succeeded(
    cluster: TestCluster, namespace: str, operator: dict[str, Any], prometheus: str
) -> None:
    name = "scraped"
    document = _small(name)
    planned = len(plan_experiment(parse_experiment(document)).runs)
    assert planned >= 1
    apply(cluster, namespace, document)
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 600)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    mine = f'namespace="{namespace}", experiment="{name}"'
    of = f"{POD}, {mine}"
    wait_for(
        lambda: _value(prometheus, f'kvbench_experiment_phase{{{of}, phase="Succeeded"}}') == 1,
        60, "Prometheus to scrape the experiment Succeeded",
    )  # fmt: skip
    assert _value(prometheus, f'kvbench_experiments{{{POD}, phase="Succeeded"}}') == 1
    assert _value(prometheus, f'kvbench_experiments{{{POD}, phase="Running"}}') == 0
    assert _value(prometheus, f"kvbench_runs_recorded_total{{{of}}}") == planned
    assert _value(prometheus, f"kvbench_runs_failed_total{{{of}}}") == 0
    assert _value(prometheus, f"kvbench_worker_wait_seconds_count{{{of}}}") == planned
    assert _value(prometheus, f"kvbench_worker_wait_seconds_sum{{{of}}}") > 0
    done = f"kvbench_experiment_runs_done{{{of}}} / kvbench_experiment_runs_planned{{{of}}}"
    assert _value(prometheus, done) == 1
    last = body["status"]["lastRun"]
    hits = _value(prometheus, f"kvbench_last_run_request_hit_ratio{{{of}}}")
    assert hits == pytest.approx(last["requestHitRate"])
    ttft = _value(prometheus, f'kvbench_last_run_ttft_seconds{{{of}, quantile="0.5"}}')
    assert ttft == pytest.approx(last["ttftP50"])
    assert _value(prometheus, 'up{job="operator-service"}') == 1, "the Service reaches the pod"
    service = f'kvbench_runs_recorded_total{{job="operator-service", {mine}}}'
    wait_for(
        lambda: _value(prometheus, service) == planned, 30,
        "Prometheus to scrape, through the Service, the runs recorded",
    )  # fmt: skip

    for where, expr in _dashboard_queries(namespace, name):
        assert _query(prometheus, expr), f"dashboard panel {where} shows nothing: {expr}"
    [wait] = [e for w, e in _dashboard_queries(namespace, name) if w.endswith("workers A")]
    waited = float(_query(prometheus, wait)[0]["value"][1])
    assert math.isfinite(waited) and waited > 0, "the first run's wait, within the window"


def test_an_invalid_experiment_counts_as_failed_and_its_series_go_with_it(
    cluster: TestCluster, namespace: str, operator: dict[str, Any], prometheus: str
) -> None:
    name = "bad-rule"
    document = experiment_document("prefix-cache-service.yaml", name, freshness="reset-cache")
    apply(cluster, namespace, document)
    body = wait_phase(cluster, namespace, name, {"Failed", "Succeeded"}, 120)
    assert body["status"]["phase"] == "Failed"
    of = f'{POD}, namespace="{namespace}", experiment="{name}"'
    wait_for(
        lambda: _value(prometheus, f'kvbench_experiment_phase{{{of}, phase="Failed"}}') == 1,
        60, "Prometheus to scrape the experiment Failed",
    )  # fmt: skip
    assert _value(prometheus, f'kvbench_experiment_phase{{{of}, phase="Pending"}}') == 0
    assert _value(prometheus, f'kvbench_experiments{{{POD}, phase="Failed"}}') == 1
    removed = cluster.kubectl("delete", "bx", name, "-n", namespace, "--timeout=120s")
    assert removed.returncode == 0, removed.stderr
    everything = f'{{__name__=~"kvbench_.+", {of}}}'
    wait_for(lambda: not _query(prometheus, everything), 60, "the experiment's series gone")
    assert _value(prometheus, f'kvbench_experiments{{{POD}, phase="Failed"}}') == 0
