"""The chart's Grafana dashboard: valid JSON Grafana can import, and every query names metrics
and labels the operator really exports (read from its exposition after a small experiment)."""

import json
import re

import pytest
from metrics_sequence import Clock, feed, two_run_plan
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.kube.chart import CHART_DIR
from kvbench.operator.metrics import OperatorMetrics

DASHBOARD = CHART_DIR / "files" / "grafana-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_GROUPING = "by|without|on|ignoring|group_left|group_right"
_KEYWORDS = {*_GROUPING.split("|"), "bool", "and", "or", "unless", "offset"}


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    dashboard = _dashboard()
    queries = [
        (f"{panel['title']} {target['refId']}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert inner, variable["query"]
            queries.append((f"${variable['name']}", inner[1]))
    return queries


def _parts(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names a PromQL expression uses."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", " ".join(re.findall(r"\{[^}]*\}", expr))))
    for group in re.findall(rf"\b(?:{_GROUPING})\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    expr = re.sub(rf"\b(?:{_GROUPING})\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    names = {
        m[1]
        for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)\s*(\()?", expr)
        if not m[2] and m[1] not in _KEYWORDS
    }
    return names, labels


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every sample name the operator exposes, with the label names it carries."""
    clock = Clock()
    metrics = OperatorMetrics(clock=clock)
    feed(metrics.experiment("ns", "exp"), clock, two_run_plan())
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def test_the_query_reader_finds_names_and_labels() -> None:
    names, labels = _parts(
        'histogram_quantile(0.9, sum by (le, namespace) (increase(a_bucket{x=~"$x", y="1"}'
        "[$window]))) / on (namespace) b_total offset 5m"
    )
    assert names == {"a_bucket", "b_total"}
    assert labels == {"le", "namespace", "x", "y"}


@pytest.mark.parametrize(("where", "expr"), _queries())
def test_every_query_names_exported_metrics_and_labels(exported, where: str, expr: str) -> None:
    names, labels = _parts(expr)
    assert names, f"{where}: no metric in {expr!r}"
    assert names <= set(exported), f"{where}: not exported: {names - set(exported)}"
    carried = set().union(*(exported[name] for name in names))
    assert labels <= carried, f"{where}: labels not carried: {labels - carried}"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    used = set().union(*(_parts(expr)[0] for _, expr in _queries()))
    assert {
        "kvbench_last_run_request_hit_ratio",
        "kvbench_last_run_ttft_seconds",
        "kvbench_experiment_runs_done",
        "kvbench_experiment_runs_planned",
        "kvbench_runs_recorded_total",
        "kvbench_runs_failed_total",
        "kvbench_worker_wait_seconds_bucket",
        "kvbench_experiments",
    } <= used


def test_the_dashboard_is_importable_on_any_prometheus_data_source() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "kvbench-operator" and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE
    cells = {(x, y) for p in panels for x, y in _cells(p["gridPos"])}
    assert len(cells) == sum(p["gridPos"]["w"] * p["gridPos"]["h"] for p in panels), "overlap"


def _cells(grid: dict) -> list[tuple[int, int]]:
    return [
        (x, y)
        for x in range(grid["x"], grid["x"] + grid["w"])
        for y in range(grid["y"], grid["y"] + grid["h"])
    ]
