"""The operator's metrics observer: what the runner's steps turn into, read back through the
exposition text as Prometheus would parse it."""

import httpx
import pytest
from click.testing import CliRunner
from metrics_sequence import (
    HIT_RATE,
    TOKEN_HIT_RATE,
    TTFT_P50,
    TTFT_P99,
    Clock,
    feed,
    record,
    state,
    status,
    two_run_plan,
)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.api import AttemptFailure, ExperimentPhase
from kvbench.cli.operator import operator
from kvbench.operator.metrics import OperatorMetrics, parse_address, serve_metrics
from kvbench.procs import free_port
from kvbench.runner.observers import FanOut
from kvbench.runner.states import RunStage

Labels = frozenset[tuple[str, str]]


def _samples(text: str) -> dict[tuple[str, Labels], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scrape(metrics: OperatorMetrics) -> dict[tuple[str, Labels], float]:
    return _samples(generate_latest(metrics.registry).decode())


def _of(name: str, namespace: str = "ns", experiment: str = "exp", **labels: str) -> tuple:
    return name, frozenset({"namespace": namespace, "experiment": experiment, **labels}.items())


def _of_experiment(
    samples: dict[tuple[str, Labels], float], experiment: str
) -> dict[tuple[str, Labels], float]:
    return {k: v for k, v in samples.items() if ("experiment", experiment) in k[1]}


def _names(samples: dict[tuple[str, Labels], float], experiment: str) -> set[str]:
    return {name for name, _ in _of_experiment(samples, experiment)}


@pytest.fixture
def fed() -> tuple[OperatorMetrics, Clock]:
    clock = Clock()
    metrics = OperatorMetrics(clock=clock)
    feed(metrics.experiment("ns", "exp"), clock, two_run_plan())
    return metrics, clock


def test_runs_recorded_and_failed_are_counted(fed) -> None:
    samples = _scrape(fed[0])
    assert samples[_of("kvbench_runs_recorded_total")] == 1
    assert samples[_of("kvbench_runs_failed_total")] == 1
    assert samples[_of("kvbench_run_attempts_failed_total", reason="WorkersNotReady")] == 1
    assert samples[_of("kvbench_run_attempts_failed_total", reason="LoadFailed")] == 1


def test_worker_wait_is_timed_per_attempt_whose_workers_got_ready(fed) -> None:
    samples = _scrape(fed[0])
    assert samples[_of("kvbench_worker_wait_seconds_count")] == 2
    assert samples[_of("kvbench_worker_wait_seconds_sum")] == 12 + 8
    assert samples[_of("kvbench_worker_wait_seconds_bucket", le="5.0")] == 0
    assert samples[_of("kvbench_worker_wait_seconds_bucket", le="10.0")] == 1
    assert samples[_of("kvbench_worker_wait_seconds_bucket", le="20.0")] == 2


def test_run_duration_spans_retries_and_says_the_outcome(fed) -> None:
    samples = _scrape(fed[0])
    assert samples[_of("kvbench_run_duration_seconds_sum", outcome="recorded")] == 40
    assert samples[_of("kvbench_run_duration_seconds_count", outcome="recorded")] == 1
    assert samples[_of("kvbench_run_duration_seconds_sum", outcome="failed")] == 5 + 2 + 8 + 15
    assert samples[_of("kvbench_run_duration_seconds_count", outcome="failed")] == 1


def test_phase_progress_and_the_last_runs_figures(fed) -> None:
    samples = _scrape(fed[0])
    for phase in ExperimentPhase:
        failed = float(phase == ExperimentPhase.FAILED)
        assert samples[("kvbench_experiments", frozenset({("phase", phase.value)}))] == failed
        assert samples[_of("kvbench_experiment_phase", phase=phase.value)] == failed
    assert samples[_of("kvbench_experiment_runs_planned")] == 2
    assert samples[_of("kvbench_experiment_runs_done")] == 2
    assert samples[_of("kvbench_last_run_request_hit_ratio")] == HIT_RATE
    assert samples[_of("kvbench_last_run_token_hit_ratio")] == TOKEN_HIT_RATE
    assert samples[_of("kvbench_last_run_ttft_seconds", quantile="0.5")] == TTFT_P50
    assert samples[_of("kvbench_last_run_ttft_seconds", quantile="0.99")] == TTFT_P99


def test_experiments_are_counted_by_phase() -> None:
    metrics = OperatorMetrics()
    plan = two_run_plan()
    for name, phase in (("a", "Running"), ("b", "Running"), ("c", "Succeeded")):
        metrics.experiment("ns", name).status(status(plan, ExperimentPhase(phase), 0))
    samples = _scrape(metrics)
    counts = {
        dict(labels)["phase"]: value
        for (name, labels), value in samples.items()
        if name == "kvbench_experiments"
    }
    assert counts == {"Pending": 0, "Running": 2, "Succeeded": 1, "Failed": 0}


def test_a_new_experiments_counters_exist_at_zero_and_no_figure_before_a_run() -> None:
    metrics = OperatorMetrics()
    metrics.experiment("ns", "new").status(status(two_run_plan(), ExperimentPhase.RUNNING, 0))
    samples = _scrape(metrics)
    assert samples[_of("kvbench_runs_recorded_total", experiment="new")] == 0
    assert samples[_of("kvbench_runs_failed_total", experiment="new")] == 0
    assert samples[_of("kvbench_worker_wait_seconds_count", experiment="new")] == 0
    assert samples[_of("kvbench_worker_wait_seconds_bucket", experiment="new", le="+Inf")] == 0
    assert samples[_of("kvbench_experiment_phase", experiment="new", phase="Running")] == 1
    assert "kvbench_last_run_request_hit_ratio" not in _names(samples, "new")
    assert "kvbench_last_run_ttft_seconds" not in _names(samples, "new")


def test_a_figure_the_last_run_lacks_has_no_series() -> None:
    metrics = OperatorMetrics()
    observer = metrics.experiment("ns", "exp")
    plan = two_run_plan()
    observer.status(status(plan, ExperimentPhase.RUNNING, 1))
    without = status(plan, ExperimentPhase.RUNNING, 1)
    assert without.last_run is not None
    without.last_run.request_hit_rate = None
    observer.status(without)
    names = _names(_scrape(metrics), "exp")
    assert "kvbench_last_run_request_hit_ratio" not in names
    assert "kvbench_last_run_token_hit_ratio" in names


def test_a_run_resumed_by_a_new_operator_is_counted_not_timed() -> None:
    clock = Clock()
    metrics = OperatorMetrics(clock=clock)
    observer = metrics.experiment("ns", "exp")
    run = two_run_plan().runs[0]
    observer.stage(run, state(run, RunStage.COLLECTING))
    clock.now += 30
    observer.stage(run, state(run, RunStage.RECORDED))
    observer.recorded(run, record(run))
    samples = _scrape(metrics)
    assert samples[_of("kvbench_runs_recorded_total")] == 1
    for outcome in ("recorded", "failed"):
        assert samples[_of("kvbench_run_duration_seconds_count", outcome=outcome)] == 0


def test_a_deleted_experiment_leaves_no_series_and_others_keep_theirs(fed) -> None:
    metrics, clock = fed
    feed(metrics.experiment("ns", "kept"), clock, two_run_plan("kept"))
    before = _scrape(metrics)
    assert before[("kvbench_experiments", frozenset({("phase", "Failed")}))] == 2
    metrics.forget("ns", "exp")
    after = _scrape(metrics)
    assert _of_experiment(after, "exp") == {}
    assert _of_experiment(after, "kept") == _of_experiment(before, "kept")
    assert after[("kvbench_experiments", frozenset({("phase", "Failed")}))] == 1


def test_fan_out_tells_every_observer_in_order() -> None:
    heard: list[tuple[str, str]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getattr__(self, event: str):
            return lambda *args, **kwargs: heard.append((self.name, event))

    plan = two_run_plan()
    run = plan.runs[0]
    fan = FanOut([Recorder("status"), Recorder("metrics")])
    fan.started(plan, 0)
    fan.stage(run, state(run, RunStage.WORKERS_STARTING))
    fan.recorded(run, record(run))
    fan.attempt_failed(run, AttemptFailure(attempt=1, reason="LoadFailed", message=""), True)
    fan.status(status(plan, ExperimentPhase.RUNNING, 1))
    events = ["started", "stage", "recorded", "attempt_failed", "status"]
    assert heard == [(who, e) for e in events for who in ("status", "metrics")]


def test_the_metrics_are_served_over_http(fed) -> None:
    port = free_port()
    server = serve_metrics(fed[0], "127.0.0.1", port)
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)
    assert samples[_of("kvbench_runs_recorded_total")] == 1
    assert any(name.startswith("process_") for name, _ in samples), "the process collector"


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
        ("[::1]:9090", ("::1", 9090)),
        ("fd00::5:9090", ("fd00::5", 9090)),
    ],
)
def test_an_address_is_host_and_port(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9090", ":9090", "host:", "host:0", "host:65536", "h:x"])
def test_a_bad_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="not HOST:PORT"):
        parse_address(address)


def test_the_operator_refuses_a_bad_metrics_address_before_it_starts() -> None:
    result = CliRunner().invoke(operator, ["-n", "bench", "--metrics", "9090"])
    assert result.exit_code == 2
    assert "Invalid value for '--metrics': '9090' is not HOST:PORT" in result.output
