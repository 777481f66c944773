"""Every back end keeps the promises the runner relies on (see conftest.py)."""

import asyncio

import pytest
from backends import Backend, small_experiment

from kvbench.api import Cleanup
from kvbench.loadgen.results import read_result
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames
from kvbench.runner.failures import LoadFailed, WorkersNotReady
from kvbench.runner.mapping import build_run_config


def _names(index: int = 0, attempt: int = 1) -> ChildNames:
    return ChildNames(experiment="contract", index=index, attempt=attempt)


async def _ready(cluster, experiment, names):
    spec = experiment.spec
    run = plan_experiment(experiment).runs[0]
    arm = spec.routing[0]
    workers = await cluster.start_workers(spec, run.variant, spec.engine, arm, names)
    endpoint = await cluster.open_arm(spec, arm, workers, names)
    config = build_run_config(spec, run, endpoint, workers, cluster.uses_simulator(spec))
    return workers, config


def test_a_start_cancelled_midway_leaves_nothing_after_teardown(backend: Backend) -> None:
    experiment = small_experiment(engine={"extraArgs": ["--load-seconds", "30"]})
    spec = experiment.spec

    async def scenario() -> None:
        cluster = backend.cluster()
        start = asyncio.create_task(
            cluster.start_workers(spec, "default", spec.engine, spec.routing[0], _names())
        )
        while not backend.leftovers():
            await asyncio.sleep(0.05)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        assert backend.leftovers(), "the cancelled start's workers are still there to stop"
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_workers_never_ready_fail_with_the_pod_and_why(backend: Backend) -> None:
    # Long enough for a loaded machine's simulator to start and log why it is not ready.
    experiment = small_experiment(
        engine={"extraArgs": ["--load-seconds", "120"]}, timeouts={"workersReady": "45s"}
    )
    spec = experiment.spec

    async def scenario() -> None:
        cluster = backend.cluster()
        with pytest.raises(WorkersNotReady) as caught:
            await cluster.start_workers(spec, "default", spec.engine, spec.routing[0], _names())
        names = backend.worker_names(experiment)
        assert set(caught.value.pods) == set(names)
        assert "Loading model weights" in caught.value.pods[names[0]], "the log says why"
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_a_load_is_collected_and_workers_check_clean(backend: Backend) -> None:
    experiment = small_experiment()

    async def scenario() -> None:
        cluster = backend.cluster()
        workers, config = await _ready(cluster, experiment, _names())
        assert all(w.uid and w.kv_cache_tokens for w in workers)
        await cluster.start_load(experiment.spec, config, _names())
        await cluster.start_load(experiment.spec, config, _names())
        document = await cluster.wait_load(_names(), 120)
        assert document[:2] == b"\x1f\x8b", "the result document, compressed"
        result = read_result(document)
        first = next((e for e in result.requests.error if e), None)
        assert result.summary.requests > 0, "a measured window"
        assert result.summary.errors == 0, (result.summary.errors_by_kind, first)
        assert (await cluster.load_state(_names())).phase == "succeeded"
        placement = await cluster.load_placement(experiment.spec.routing[0], _names())
        assert placement is not None and placement.load_generator, "the node it ran on"
        assert placement.router is None, "a Service arm has no router"
        assert await cluster.check_workers(workers) == []
        await cluster.release_load(_names(), keep=False)
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_a_worker_that_dies_in_the_window_is_reported(backend: Backend) -> None:
    experiment = small_experiment()

    async def scenario() -> None:
        cluster = backend.cluster()
        workers, config = await _ready(cluster, experiment, _names())
        await cluster.start_load(experiment.spec, config, _names())
        await backend.kill_worker(workers[1])
        await cluster.wait_load(_names(), 120)
        problems = await cluster.check_workers(workers)
        assert len(problems) == 1 and problems[0].startswith(workers[1].name)
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_a_load_generator_that_dies_fails_the_load(backend: Backend) -> None:
    # At time scale 1 the window lasts seconds: the kill lands while it sends, not after it
    # wrote its result (at the default 0.05 a quick node finished first).
    experiment = small_experiment(simulator={"timeScale": 1.0})

    async def scenario() -> None:
        cluster = backend.cluster()
        _, config = await _ready(cluster, experiment, _names())
        await cluster.start_load(experiment.spec, config, _names())
        await backend.kill_load(_names())
        # locally the process is gone without a result; on the cluster the Job has no second
        # try (backoffLimit 0), and its failure is the load's
        with pytest.raises(LoadFailed, match=r"without a result|BackoffLimitExceeded"):
            await cluster.wait_load(_names(), 60)
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_a_load_past_its_deadline_is_stopped_and_leaves_its_partial_result(
    backend: Backend,
) -> None:
    """Stopped in its measured window (SIGTERM), the load generator writes what it measured,
    marked partial; the runner keeps it as the failed attempt's evidence."""
    experiment = small_experiment(simulator={"timeScale": 1.0})

    async def scenario() -> None:
        cluster = backend.cluster()
        _, config = await _ready(cluster, experiment, _names())
        await cluster.start_load(experiment.spec, config, _names())
        document = await cluster.wait_load(_names(), 12.0)
        result = read_result(document)
        assert result.partial is not None and "measured window" in result.partial
        sent = [r for r in result.records() if r.phase == "measured"]
        assert sent and len(sent) < result.conditions.measured_requests
        assert (await cluster.load_state(_names())).phase != "running"
        await cluster.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_a_restarted_runner_adopts_a_running_load(backend: Backend) -> None:
    """The first cluster object is abandoned mid-load (its runner died); a second one, on the
    same place, finds the load running and collects it, and the workers check clean."""
    experiment = small_experiment()

    async def first() -> tuple:
        cluster = backend.cluster()
        workers, config = await _ready(cluster, experiment, _names())
        await cluster.start_load(experiment.spec, config, _names())
        await cluster.detach()
        return workers, config

    workers, config = asyncio.run(first())

    async def second() -> None:
        cluster = backend.cluster()
        await cluster.recover(keep=_names())
        assert (await cluster.load_state(_names())).phase in ("running", "succeeded")
        await cluster.start_load(experiment.spec, config, _names())
        document = await cluster.wait_load(_names(), 120)
        assert document
        assert await cluster.check_workers(workers) == []
        await cluster.teardown(Cleanup())

    asyncio.run(second())
    assert backend.leftovers() == []


def test_recover_without_an_adoptable_load_stops_everything(backend: Backend) -> None:
    experiment = small_experiment()

    async def scenario() -> None:
        cluster = backend.cluster()
        await _ready(cluster, experiment, _names())
        await cluster.detach()
        assert backend.leftovers()
        await backend.cluster().recover(keep=None)

    asyncio.run(scenario())
    assert backend.leftovers() == []


def test_workers_start_again_at_once_after_a_recover(backend: Backend) -> None:
    """A restarted runner with no run to adopt removes the workers (`recover`), then starts
    the next run's: new pods, Ready, and none refused for standing beside the old ones (a
    StatefulSet made again under its old name while its old pods terminate)."""
    experiment = small_experiment(timeouts={"workersReady": "90s"})

    async def scenario() -> None:
        first, _ = await _ready(backend.cluster(), experiment, _names())
        restarted = backend.cluster()
        await restarted.recover(keep=None)
        spec = experiment.spec
        again = await restarted.start_workers(spec, "default", spec.engine, spec.routing[0],
                                              _names(1))  # fmt: skip
        assert {w.name for w in again} == {w.name for w in first}
        assert not {w.uid for w in again} & {w.uid for w in first}, "new pods"
        await restarted.teardown(Cleanup())

    asyncio.run(scenario())
    assert backend.failed_creations() == []
    assert backend.leftovers() == []
