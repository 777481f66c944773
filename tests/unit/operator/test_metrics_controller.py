"""The controller's side of the metrics: an experiment seen at daemon start is counted by the
phase its resource carries (a finished one is never run again, but still shows), and a deleted
one's series go. No API server: these paths make no call."""

import asyncio

import kubernetes
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.operator.experiments import ExperimentController
from kvbench.operator.metrics import OperatorMetrics


def _body(name: str, status: dict) -> dict:
    return {
        "apiVersion": "kvbench.io/v1alpha1",
        "kind": "BenchmarkExperiment",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": {},
        "status": status,
    }


def _values(metrics: OperatorMetrics, metric: str) -> dict[tuple[str, ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        tuple(v for k, v in sorted(s.labels.items()) if k != "namespace"): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == metric
    }


async def _never() -> bool:
    raise AssertionError("a finished experiment is not waited on")


def _start(controller: ExperimentController, body: dict) -> None:
    asyncio.run(controller.run(body, _never))


SUCCEEDED = {
    "phase": "Succeeded",
    "progress": {"done": 4, "failed": 0, "total": 4, "display": "4/4"},
    "lastRun": {"id": "r3", "index": 3, "attempt": 1, "requestHitRate": 0.5, "ttftP50": 0.2},
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Succeeded", "message": ""},
    ],
}


def test_finished_experiments_seen_at_start_are_counted_with_their_figures() -> None:
    metrics = OperatorMetrics()
    controller = ExperimentController(kubernetes.client.ApiClient(), "img", metrics)
    _start(controller, _body("done", SUCCEEDED))
    _start(controller, _body("bad", {"phase": "Failed", "message": "InvalidSpec"}))
    phases = _values(metrics, "kvbench_experiments")
    assert phases == {("Pending",): 0, ("Running",): 0, ("Succeeded",): 1, ("Failed",): 1}
    assert _values(metrics, "kvbench_experiment_phase")[("done", "Succeeded")] == 1
    assert _values(metrics, "kvbench_experiment_runs_done") == {("done",): 4}
    assert _values(metrics, "kvbench_experiment_runs_planned") == {("done",): 4}
    assert _values(metrics, "kvbench_last_run_request_hit_ratio") == {("done",): 0.5}
    assert _values(metrics, "kvbench_last_run_ttft_seconds") == {("done", "0.5"): 0.2}


def test_a_status_this_version_cannot_read_still_counts_by_its_phase() -> None:
    metrics = OperatorMetrics()
    controller = ExperimentController(kubernetes.client.ApiClient(), "img", metrics)
    _start(controller, _body("future", {**SUCCEEDED, "newField": {"x": 1}}))
    assert _values(metrics, "kvbench_experiment_phase")[("future", "Succeeded")] == 1
    assert _values(metrics, "kvbench_experiment_runs_done") == {}


def test_a_deleted_experiment_is_forgotten() -> None:
    metrics = OperatorMetrics()
    controller = ExperimentController(kubernetes.client.ApiClient(), "img", metrics)
    for name in ("gone", "kept"):
        _start(controller, _body(name, SUCCEEDED))
    controller.deleted("ns", "gone")
    assert _values(metrics, "kvbench_experiments")[("Succeeded",)] == 1
    assert {k[0] for k in _values(metrics, "kvbench_experiment_phase")} == {"kept"}
    assert _values(metrics, "kvbench_runs_recorded_total") == {("kept",): 0}
