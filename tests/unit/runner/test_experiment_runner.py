"""The runner's state machine over a fake cluster: freshness, retries, failures as data,
resuming from the store at every stage, and the status it publishes."""

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from fake_cluster import FakeCluster

from kvbench.api import REPRODUCES, parse_experiment
from kvbench.loadgen.workload.trace_source import load_trace
from kvbench.runner import DirectoryStore, ExperimentRunner, RunStage, StoreMismatch
from kvbench.runner.failures import SpecNotRunnable

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "examples" / "traces" / "small-mooncake.jsonl"


def _experiment(**spec_changes):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["workload"]["sharedPrefix"]["prefixes"] = [2, 7]
    document["spec"]["load"]["trials"] = 2
    document["spec"]["routing"] = [
        {"name": "service", "service": {}},
        {"name": "cache-aware", "router": {"policy": "cache_aware"}},
        {"name": "affinity", "prefixAffinity": {}},
    ]
    document["spec"].update(spec_changes)
    return parse_experiment(document)


def _run(experiment, cluster, store, **kwargs):
    return asyncio.run(ExperimentRunner(experiment, cluster, store, **kwargs).run())


def _journal(store: DirectoryStore) -> list[dict]:
    return [json.loads(line) for line in (store.root / "events.jsonl").read_text().splitlines()]


def test_restart_freshness_starts_workers_for_every_run(tmp_path: Path) -> None:
    cluster = FakeCluster()
    result = _run(_experiment(), cluster, DirectoryStore(tmp_path))
    assert len(result.records) == 3 * 2 * 2
    assert cluster.starts == len(result.records)
    assert cluster.calls[-1] == "teardown"
    assert all(len(r.pods) == 6 and r.pods[0].kv_cache_tokens == 9360 for r in result.records)
    assert all(r.pods[0].uid and r.pods[0].uid.startswith("uid-") for r in result.records)
    assert len({r.pods[0].uid for r in result.records}) == 12, "a new start for every run"


def test_no_freshness_reuses_workers_and_arms(tmp_path: Path) -> None:
    cluster = FakeCluster()
    simulator = {"routerTimeScale": None}  # every arm at one time scale
    _run(_experiment(freshness="none", simulator=simulator), cluster, DirectoryStore(tmp_path))
    assert cluster.starts == 1
    assert [c for c in cluster.calls if c.startswith("open")] == [
        "open:service",
        "open:cache-aware",
        "open:affinity",
    ]


def test_router_arms_run_at_the_router_time_scale(tmp_path: Path) -> None:
    """Catches a router arm run at the experiment's time scale, where the router (on the wall
    clock) sees requests complete in another order than the simulated hardware would give,
    and workers kept across arms although their clocks differ."""
    cluster = FakeCluster()
    experiment = _experiment(freshness="none", simulator={"timeScale": 0.05})
    result = _run(experiment, cluster, DirectoryStore(tmp_path))
    scales = {}
    for record in result.records:
        config = next(c for c in cluster.configs.values() if c.run_id == record.id)
        scales.setdefault(record.arm, set()).add(config.time_scale)
    assert scales == {"service": {0.05}, "cache-aware": {1.0}, "affinity": {0.05}}
    assert cluster.starts == 3, "new workers where the time scale changes"
    planned = {r.arm: r.estimated_local_seconds for r in ExperimentRunner(
        experiment, FakeCluster(), DirectoryStore(tmp_path / "plan")).plan.runs}  # fmt: skip
    assert planned["cache-aware"] > 5 * planned["service"]


def test_child_names_come_from_the_run_index_and_fit_kubernetes(tmp_path: Path) -> None:
    cluster = FakeCluster()
    experiment = _experiment()
    experiment.metadata.name = "a" * 40
    _run(experiment, cluster, DirectoryStore(tmp_path))
    loads = [c.removeprefix("load:") for c in cluster.calls if c.startswith("load:")]
    assert loads[0] == f"{'a' * 40}-r0-a1-load"
    assert all(len(name) <= 63 and "." not in name for name in loads)


def test_a_failed_attempt_is_retried_on_fresh_workers_then_recorded(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster(fail_loads={3})
    result = _run(_experiment(), cluster, store)
    assert not result.failed
    third = result.records[2]
    assert third.attempt == 2
    assert [f.reason for f in third.failed_attempts] == ["LoadFailed"]
    assert "last line of w0" in third.failed_attempts[0].message, "worker logs explain it"
    assert cluster.starts == 12 + 1, "the retry started fresh workers"


def test_a_run_out_of_attempts_is_recorded_failed_and_the_others_go_on(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster(fail_loads={2, 3})
    result = _run(_experiment(), cluster, store)
    assert [r.index for r in result.failed] == [1]
    failed = result.failed[0]
    assert failed.error_reason == "LoadFailed" and len(failed.failed_attempts) == 2
    assert len(result.records) == 12
    assert all(r.error is None for r in result.records if r.index != 1)
    point = next(p for p in store.aggregate() if (p.arm, p.point.key) == ("service", "p2-c8"))
    assert point.trials == 1, "the failed trial is left out of the median"


def test_retries_zero_fails_at_the_first_failure(tmp_path: Path) -> None:
    result = _run(
        _experiment(execution={"retries": 0}), FakeCluster(fail_loads={1}), DirectoryStore(tmp_path)
    )
    assert [r.index for r in result.failed] == [0]


def test_a_disturbed_window_is_never_recorded_as_good(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster(disturb={1})
    result = _run(_experiment(), cluster, store)
    first = result.records[0]
    assert first.attempt == 2
    assert first.failed_attempts[0].reason == "WorkersDisturbed"
    assert "w0: restarted" in first.failed_attempts[0].message
    assert (tmp_path / "raw" / "r0-a1.json.gz").exists(), "the void attempt's result is kept"
    assert first.failed_attempts[0].raw_results == "raw/r0-a1.json.gz"
    assert first.raw_results == "raw/r0-a2.json.gz"


def test_a_load_stopped_early_is_kept_partial_retried_and_left_out_of_aggregates(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    result = _run(_experiment(), FakeCluster(stop_loads={1}), store)
    first = result.records[0]
    [stopped] = first.failed_attempts
    assert (stopped.reason, stopped.partial) == ("LoadStopped", True)
    assert "stopped (SIGTERM)" in stopped.message
    assert stopped.raw_results == "raw/r0-a1.json.gz"
    assert (tmp_path / stopped.raw_results).exists(), "the partial result is kept"
    assert (first.attempt, first.raw_results) == (2, "raw/r0-a2.json.gz")
    assert not result.failed
    trials = {p.trials for p in store.aggregate()}
    assert trials == {2}, "every point aggregates its two good trials, the partial one not"


def test_a_window_where_every_request_failed_is_retried_not_recorded(tmp_path: Path) -> None:
    """Requests that all failed measured no server: the attempt fails (its document kept),
    the next one is the record."""
    store = DirectoryStore(tmp_path)
    result = _run(_experiment(), FakeCluster(refused_loads={1}), store)
    first = result.records[0]
    [refused] = first.failed_attempts
    assert refused.reason == "NoResponses"
    assert "every one of the" in refused.message and "connection refused" in refused.message
    assert refused.raw_results == "raw/r0-a1.json.gz"
    assert (first.attempt, first.error) == (2, None)
    assert first.summary.errors == 0


def test_a_spec_the_back_end_cannot_run_fails_before_anything(tmp_path: Path) -> None:
    cluster = FakeCluster(problems_found=["spec.metrics.source: no"])
    with pytest.raises(SpecNotRunnable, match=r"spec\.metrics\.source"):
        _run(_experiment(), cluster, DirectoryStore(tmp_path))
    assert cluster.calls == []
    assert not (tmp_path / "experiment.yaml").exists()


def _replay(max_model_len: int = 4096, warmups: int = 0):
    document = yaml.safe_load((ROOT / "examples" / "trace-replay.yaml").read_text())
    document["spec"]["engine"]["maxModelLen"] = max_model_len
    document["spec"]["workload"]["trace"]["file"] = str(TRACE)
    document["spec"]["load"]["warmup"] = {"requests": warmups}
    experiment = parse_experiment(document)
    assert experiment.spec.workload.trace is not None
    return experiment, load_trace(experiment.spec.workload.trace, TRACE)


def test_a_trace_the_spec_cannot_replay_fails_before_anything(tmp_path: Path) -> None:
    experiment, trace = _replay(max_model_len=2048, warmups=200)
    cluster = FakeCluster()
    with pytest.raises(SpecNotRunnable) as refused:
        _run(experiment, cluster, DirectoryStore(tmp_path), trace=trace)
    assert cluster.calls == []
    text = str(refused.value)
    assert "spec.load.warmup.requests: 200 warm-up rows leave none of the 200 rows" in text
    first_long = next(
        line
        for row, line in zip(trace.rows, trace.lines, strict=True)
        if row.input_length + row.output_length > 2048
    )
    assert f"small-mooncake.jsonl line {first_long} holds" in text
    assert "above the engine.maxModelLen 2048 of variant 'default'" in text


def test_a_trace_workload_is_planned_from_its_trace(tmp_path: Path) -> None:
    experiment, trace = _replay(warmups=20)
    runner = ExperimentRunner(experiment, FakeCluster(), DirectoryStore(tmp_path), trace=trace)
    assert {(r.warmup_requests, r.measured_requests) for r in runner.plan.runs} == {(20, 180)}
    with pytest.raises(ValueError, match="planned with its trace"):
        ExperimentRunner(experiment, FakeCluster(), DirectoryStore(tmp_path))


def test_aggregate_and_hit_rate_model(tmp_path: Path) -> None:
    """Under uniform popularity the model is the article's min(1, held / P) within a point;
    prefix affinity over 6 workers holds 7 prefixes whole."""
    store = DirectoryStore(tmp_path)
    _run(_experiment(), FakeCluster(), store)
    points = {(p.arm, p.point.key): p for p in store.aggregate()}
    assert len(points) == 3 * 2
    seven = points[("service", "p7-c8")]
    assert seven.trials == 2
    assert seven.request_hit_rate == pytest.approx(round(200 * 3.95 / 7) / 200)
    held = 9360 / 2371
    assert seven.predicted_hit_rate == pytest.approx(held / 7, abs=0.01)
    assert seven.predicted_affinity_hit_rate == pytest.approx(1.0, abs=0.001)
    assert seven.popularity == "uniform"
    assert points[("service", "p2-c8")].predicted_hit_rate == pytest.approx(1.0, abs=0.001)


def test_directory_of_another_experiment_or_format_is_refused(tmp_path: Path) -> None:
    _run(_experiment(), FakeCluster(), DirectoryStore(tmp_path / "a"))
    with pytest.raises(StoreMismatch, match="another experiment"):
        _run(_experiment(freshness="none"), FakeCluster(), DirectoryStore(tmp_path / "a"))
    old = tmp_path / "old"
    old.mkdir()
    (old / "experiment.yaml").write_text("spec: {}\n")
    with pytest.raises(StoreMismatch, match="format 1"):
        _run(_experiment(), FakeCluster(), DirectoryStore(old))


def test_the_published_measurement_named_is_kept_and_does_not_change_identity(
    tmp_path: Path,
) -> None:
    """The store keeps the `kvbench.io/reproduces` annotation for the report; resuming from a
    file that names another (or none) is the same experiment, and keeps what the store has."""
    annotated = _experiment()
    annotated.metadata.annotations = {REPRODUCES: "article-002-6-workers", "other": "x"}
    store = DirectoryStore(tmp_path / "a")
    store.open(annotated)
    assert store.experiment().metadata.annotations == {REPRODUCES: "article-002-6-workers"}
    plain = DirectoryStore(tmp_path / "a")
    plain.open(_experiment())
    assert plain.experiment().metadata.annotations == {REPRODUCES: "article-002-6-workers"}
    with pytest.raises(StoreMismatch, match="another experiment"):
        DirectoryStore(tmp_path / "a").open(_experiment(freshness="none"))


def test_dynamo_arms_bring_their_own_workers(tmp_path: Path) -> None:
    """Without freshness, vLLM workers are shared by the arms that use them; every Dynamo arm
    starts its own workers (its router mode is part of the Dynamo deployment)."""
    cluster = FakeCluster()
    arms = [
        {"name": "service", "service": {}},
        {"name": "affinity", "prefixAffinity": {}},
        {"name": "dyn-random", "dynamo": {"routerMode": "random"}},
        {"name": "dyn-kv", "dynamo": {"routerMode": "kv"}},
    ]
    experiment = _experiment(freshness="none", routing=arms)
    _run(experiment, cluster, DirectoryStore(tmp_path))
    starts = [c for c in cluster.calls if c.startswith("start")]
    assert starts == ["start:default:vllm", "start:default:dynamo", "start:default:dynamo"]


@pytest.mark.parametrize(
    ("stage", "load_started"),
    [
        (RunStage.WORKERS_STARTING, False),
        (RunStage.WORKERS_READY, False),
        (RunStage.ARM_OPEN, False),
        (RunStage.LOAD_RUNNING, False),
        (RunStage.LOAD_RUNNING, True),
        (RunStage.COLLECTING, True),
        (RunStage.RECORDED, True),
    ],
)
def test_a_runner_stopped_at_any_stage_is_continued_exactly_once(
    tmp_path: Path, stage: RunStage, load_started: bool
) -> None:
    """Cancel the runner (as a dying operator does: detached) at `stage` of run 4 (before or
    after its load generator started), then let a new runner with a new cluster continue from
    the store: every run recorded once, no load generator started twice for one attempt, the
    stopped run's load adopted once it had started."""
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster()
    held = []

    async def stop_at_stage() -> None:
        def hold(state):
            started = state.load_started_at is not None
            if state.index == 4 and state.stage == stage and started == load_started:
                held.append(state)
                return True
            return False

        runner = ExperimentRunner(_experiment(), cluster, store, hold=hold)
        task = asyncio.create_task(runner.run(on_cancel="detach"))
        while not held:
            assert not task.done(), "the runner never reached the stage"
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(stop_at_stage())
    assert cluster.calls[-1] == "detach", "a stopped host leaves the children running"
    resumed = FakeCluster()
    resumed.configs, resumed.states = cluster.configs, cluster.states
    result = _run(_experiment(), resumed, DirectoryStore(tmp_path))
    assert [r.index for r in result.records] == list(range(12))
    recorded = [e["index"] for e in _journal(store) if e["stage"] == "recorded"]
    assert sorted(recorded) == list(range(12)), "each run recorded exactly once"
    started = [c for c in cluster.calls + resumed.calls if c.startswith("load:")]
    assert len(started) == len(set(started)) == 12, "one load generator per attempt"
    assert all(r.attempt == 1 for r in result.records), "nothing was lost, nothing retried"
    adopted = stage == RunStage.LOAD_RUNNING
    assert [k.index if k else None for k in resumed.recovered] == [4 if adopted else None]
    if adopted and load_started:
        assert not [c for c in resumed.calls if c.startswith("load:") and "-r4-" in c]


def test_a_load_that_vanished_while_nobody_watched_costs_one_attempt(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster()
    cluster.hold_load = True

    async def stop_in_window() -> None:
        runner = ExperimentRunner(_experiment(), cluster, store)
        task = asyncio.create_task(runner.run(on_cancel="detach"))
        while cluster.loads_waited == 0:
            assert not task.done()
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(stop_in_window())
    resumed = FakeCluster()
    result = _run(_experiment(), resumed, store)
    first = result.records[0]
    assert first.attempt == 2 and first.failed_attempts[0].reason == "LoadFailed"
    assert len(result.records) == 12 and not result.failed


def test_a_user_interrupt_voids_the_attempt_without_spending_the_budget(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    cluster = FakeCluster()
    cluster.hold_load = True

    async def interrupt_in_window() -> None:
        task = asyncio.create_task(ExperimentRunner(_experiment(), cluster, store).run())
        while cluster.loads_waited == 0:
            assert not task.done()
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt_in_window())
    assert cluster.calls[-1] == "teardown"
    assert store.states()[0].attempt == 2 and store.states()[0].failures == []
    result = _run(_experiment(), FakeCluster(), store)
    assert result.records[0].attempt == 2 and result.records[0].failed_attempts == []


def test_the_status_names_the_run_under_way_and_the_last_figures(tmp_path: Path) -> None:
    statuses = []

    class Observer:
        def started(self, plan, done):
            pass

        def stage(self, run, state):
            pass

        def recorded(self, run, record):
            pass

        def attempt_failed(self, run, failure, retrying):
            pass

        def status(self, status):
            statuses.append(status)

    _run(_experiment(), FakeCluster(), DirectoryStore(tmp_path), observer=Observer())
    running = [s for s in statuses if s.current is not None]
    assert running[0].current.stage == "workers-starting"
    assert {s.current.stage for s in running} >= {"load-running", "collecting"}
    final = statuses[-1]
    assert final.phase == "Succeeded" and final.current is None
    assert final.progress.display == "12/12"
    assert final.last_run.id == "default.affinity.p7-c8.t2"
    assert len(final.last_run.pods) == 6
    assert final.results.location == str(tmp_path)


class _Statuses:
    """An observer keeping every status the runner publishes."""

    def __init__(self) -> None:
        self.seen: list = []

    def started(self, plan, done) -> None: ...
    def stage(self, run, state) -> None: ...
    def recorded(self, run, record) -> None: ...
    def attempt_failed(self, run, failure, retrying) -> None: ...

    def status(self, status) -> None:
        self.seen.append(status)


def test_workers_whose_gpus_are_taken_wait_pending_with_the_reason_then_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kvbench.runner.experiment.CAPACITY_POLL_SECONDS", 0.01)
    observer = _Statuses()
    cluster = FakeCluster(busy_gpus=2)
    result = _run(_experiment(), cluster, DirectoryStore(tmp_path), observer=observer)
    assert cluster.calls.count("no-capacity") == 2
    waiting = [s for s in observer.seen if s.phase == "Pending"]
    assert len(waiting) == 2 and all("0 fit now" in (s.message or "") for s in waiting)
    assert not result.failed and all(r.attempt == 1 for r in result.records), "no attempt spent"
    assert observer.seen[-1].phase == "Succeeded" and observer.seen[-1].message is None


def test_objectives_reach_the_load_generator_and_goodput_the_records(tmp_path: Path) -> None:
    """The fake servers answer hits in 40 ms and misses in 110 ms: against a 100 ms TTFT
    objective exactly the hits are good, so attainment is the hit rate."""
    store = DirectoryStore(tmp_path)
    result = _run(_experiment(slo={"ttft": "100ms"}), FakeCluster(), store)
    for record in result.records:
        s = record.summary
        assert s.slo_met == {"ttft": s.request_hit_rate}
        assert s.slo_attainment == s.request_hit_rate
        assert s.goodput == pytest.approx(s.requests_per_second * s.slo_attainment)
    seven = next(p for p in store.aggregate() if p.point.key == "p7-c8")
    assert seven.slo_attainment == seven.request_hit_rate
    unjudged = _run(_experiment(), FakeCluster(), DirectoryStore(tmp_path / "none"))
    assert all(r.summary.goodput is None for r in unjudged.records)
