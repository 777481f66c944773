"""The operator's own Prometheus metrics: where its experiments are and how their runs go.

One `OperatorMetrics` per operator process holds the registry that `kvbench operator
--metrics` serves; each experiment gets an `ExperimentMetrics`, a RunObserver beside the
status writer. Per-experiment series carry `namespace` and `experiment` labels and are removed
when the experiment is deleted, so a long-lived operator does not keep dead label sets.
Durations are measured on this process's monotonic clock: a run that a restarted operator
resumes half-way is counted but not timed. docs/monitoring.md lists every metric.
"""

import threading
import time
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvbench.api import AttemptFailure, ExperimentPhase, ExperimentStatus, RunRecord
from kvbench.plan import Plan, PlannedRun
from kvbench.runner.states import RunStage, RunState

__all__ = ["ExperimentMetrics", "OperatorMetrics", "parse_address", "serve_metrics"]

_EXPERIMENT = ("namespace", "experiment")
_WORKER_WAIT_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)
_RUN_BUCKETS = (10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
_OUTCOMES = ("recorded", "failed")


class _Phases(Collector):
    """Each experiment's phase, counted per phase at scrape time (no count to keep in step)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], ExperimentPhase] = {}

    def set(self, key: tuple[str, str], phase: ExperimentPhase) -> None:
        with self._lock:
            self._phases[key] = phase

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._phases.pop(key, None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            phases = sorted(self._phases.items())
        counts = GaugeMetricFamily(
            "kvbench_experiments", "Experiments the operator sees, by phase", labels=["phase"]
        )
        for phase in ExperimentPhase:
            counts.add_metric([phase.value], sum(1 for _, p in phases if p == phase))
        each = GaugeMetricFamily(
            "kvbench_experiment_phase",
            "1 for the phase the experiment is in, 0 for the others",
            labels=[*_EXPERIMENT, "phase"],
        )
        for (namespace, name), current in phases:
            for phase in ExperimentPhase:
                each.add_metric([namespace, name, phase.value], float(phase == current))
        return [counts, each]


class OperatorMetrics:
    """Every metric of one operator process, in its own registry."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.phases = _Phases()
        self.registry.register(self.phases)
        r = self.registry
        self.runs_recorded = Counter(
            "kvbench_runs_recorded", "Runs recorded with figures", _EXPERIMENT, registry=r
        )
        self.runs_failed = Counter(
            "kvbench_runs_failed", "Runs recorded as failed (every attempt failed)",
            _EXPERIMENT, registry=r,
        )  # fmt: skip
        self.attempts_failed = Counter(
            "kvbench_run_attempts_failed", "Failed attempts of runs, retried or not, by reason",
            [*_EXPERIMENT, "reason"], registry=r,
        )  # fmt: skip
        self.run_duration = Histogram(
            "kvbench_run_duration_seconds",
            "One run from its first workers-starting to recorded or failed, retries included",
            [*_EXPERIMENT, "outcome"], buckets=_RUN_BUCKETS, registry=r,
        )  # fmt: skip
        self.worker_wait = Histogram(
            "kvbench_worker_wait_seconds",
            "One attempt from workers-starting to workers-ready",
            _EXPERIMENT, buckets=_WORKER_WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.runs_planned = Gauge(
            "kvbench_experiment_runs_planned", "Runs in the experiment's plan", _EXPERIMENT,
            registry=r,
        )  # fmt: skip
        self.runs_done = Gauge(
            "kvbench_experiment_runs_done", "Runs recorded or failed for good, from the store",
            _EXPERIMENT, registry=r,
        )  # fmt: skip
        self.request_hit_ratio = Gauge(
            "kvbench_last_run_request_hit_ratio",
            "Share of the last recorded run's requests that hit cached tokens",
            _EXPERIMENT, registry=r,
        )  # fmt: skip
        self.token_hit_ratio = Gauge(
            "kvbench_last_run_token_hit_ratio",
            "Hit tokens / queried tokens of the last recorded run (the engines' counters)",
            _EXPERIMENT, registry=r,
        )  # fmt: skip
        self.ttft = Gauge(
            "kvbench_last_run_ttft_seconds",
            "Time to first token of the last recorded run, by quantile (simulated seconds "
            "under a simulator)",
            [*_EXPERIMENT, "quantile"], registry=r,
        )  # fmt: skip
        self._labelled: tuple[MetricWrapperBase, ...] = (
            self.runs_recorded, self.runs_failed, self.attempts_failed, self.run_duration,
            self.worker_wait, self.runs_planned, self.runs_done, self.request_hit_ratio,
            self.token_hit_ratio, self.ttft,
        )  # fmt: skip

    def experiment(self, namespace: str, name: str) -> "ExperimentMetrics":
        """The observer of one experiment. Its counters and histograms start at zero, so that
        `increase()` sees the first run too and a query for failures finds a 0, not nothing."""
        self.runs_recorded.labels(namespace, name)
        self.runs_failed.labels(namespace, name)
        self.worker_wait.labels(namespace, name)
        for outcome in _OUTCOMES:
            self.run_duration.labels(namespace, name, outcome)
        return ExperimentMetrics(self, namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted experiment."""
        self.phases.forget((namespace, name))
        for metric in self._labelled:
            metric.remove_by_labels({"namespace": namespace, "experiment": name})


class ExperimentMetrics:
    """The runner's observer that turns one experiment's steps into metrics."""

    def __init__(self, metrics: OperatorMetrics, namespace: str, name: str) -> None:
        self.metrics = metrics
        self.labels = (namespace, name)
        self._run_started: dict[int, float] = {}
        self._workers_started: dict[int, float] = {}

    def phase(self, phase: ExperimentPhase) -> None:
        """Where the experiment is, also when it ended outside the runner (an invalid spec)."""
        self.metrics.phases.set(self.labels, ExperimentPhase(phase))

    def started(self, plan: Plan, done: int) -> None:
        self.metrics.runs_planned.labels(*self.labels).set(len(plan.runs))
        self.metrics.runs_done.labels(*self.labels).set(done)

    def stage(self, run: PlannedRun, state: RunState) -> None:
        now = self.metrics.clock()
        if state.stage == RunStage.WORKERS_STARTING:
            self._run_started.setdefault(run.index, now)
            self._workers_started[run.index] = now
        elif state.stage == RunStage.WORKERS_READY:
            started = self._workers_started.pop(run.index, None)
            if started is not None:
                self.metrics.worker_wait.labels(*self.labels).observe(now - started)

    def recorded(self, run: PlannedRun, record: RunRecord) -> None:
        self.metrics.runs_recorded.labels(*self.labels).inc()
        self._finished(run, _OUTCOMES[0])

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None:
        self.metrics.attempts_failed.labels(*self.labels, failure.reason).inc()
        self._workers_started.pop(run.index, None)
        if not retrying:
            self.metrics.runs_failed.labels(*self.labels).inc()
            self._finished(run, _OUTCOMES[1])

    def status(self, status: ExperimentStatus) -> None:
        m = self.metrics
        self.phase(ExperimentPhase(status.phase))
        if status.progress.total:
            m.runs_planned.labels(*self.labels).set(status.progress.total)
            m.runs_done.labels(*self.labels).set(status.progress.done)
        last = status.last_run
        hits, tokens, p50, p99 = (
            (last.request_hit_rate, last.token_hit_rate, last.ttft_p50, last.ttft_p99)
            if last
            else (None, None, None, None)
        )
        self._set(m.request_hit_ratio, hits)
        self._set(m.token_hit_ratio, tokens)
        self._set(m.ttft, p50, "0.5")
        self._set(m.ttft, p99, "0.99")

    def _finished(self, run: PlannedRun, outcome: str) -> None:
        started = self._run_started.pop(run.index, None)
        if started is not None:
            duration = self.metrics.clock() - started
            self.metrics.run_duration.labels(*self.labels, outcome).observe(duration)

    def _set(self, gauge: Gauge, value: float | None, *extra: str) -> None:
        """Set the series, or remove it while there is no figure (no run recorded yet)."""
        if value is None:
            gauge.remove(*self.labels, *extra)
        else:
            gauge.labels(*self.labels, *extra).set(value)


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host with or without brackets) as the server binds it."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def serve_metrics(metrics: OperatorMetrics, host: str, port: int) -> WSGIServer:
    """Serve the registry at http://HOST:PORT/metrics from a daemon thread (beside kopf's
    event loop, so a scrape never waits on it)."""
    server, _ = start_http_server(port, host, registry=metrics.registry)
    return server
