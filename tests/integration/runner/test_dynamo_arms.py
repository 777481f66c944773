"""Dynamo arms on the local back end: the Service, Dynamo's random router and its KV router
on one seeded request sequence, under cache pressure (16 prefixes over 4 workers that hold
~3.95 requests each, 16 in flight; 640 requests, so that one run's hit rate is within about
two points of its mean: Dynamo's random router is not seeded)."""

import copy
import importlib.util
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.dynamo.metrics import WorkerCounters, scrape_worker
from kvbench.plan import PlannedRun
from kvbench.runner import RunStage, RunState

ROOT = Path(__file__).resolve().parents[3]
DYNAMO_ARMS = ("dynamo-random", "dynamo-kv")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dynamo") is None,
    reason="NVIDIA Dynamo is not installed: run scripts/install-dynamo.sh (.ci/run does)",
)


class WorkerScrapes:
    """A runner observer that reads every Dynamo worker's own counters (its `/metrics`) once
    the run's load is collected, while the workers still run: the mockers' account of what
    they served, independent of the frontend's attribution in the responses."""

    def __init__(self) -> None:
        self.by_arm: dict[str, dict[str, WorkerCounters]] = {}

    def stage(self, run: PlannedRun, state: RunState) -> None:
        if state.stage == RunStage.COLLECTING and run.arm in DYNAMO_ARMS:
            self.by_arm[run.arm] = {w.name: scrape_worker(w.metrics_url) for w in state.workers}

    def started(self, plan, done) -> None: ...

    def recorded(self, run, record) -> None: ...

    def attempt_failed(self, run, failure, retrying) -> None: ...

    def status(self, status) -> None: ...


@pytest.fixture(scope="module")
def dynamo_runs(tmp_path_factory, run_local):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-dynamo.yaml").read_text())
    document = copy.deepcopy(document)
    document["spec"]["workload"]["sharedPrefix"].update(prefixes=[16], requestsPerPrefix=40)
    document["spec"]["load"]["trials"] = 1
    scrapes = WorkerScrapes()
    ran = run_local(parse_experiment(document), tmp_path_factory.mktemp("dynamo"), scrapes)
    return ran, scrapes


def test_identical_sequences_and_no_errors(dynamo_runs) -> None:
    ran, _ = dynamo_runs
    assert {r.digest for r in ran.records} == {ran.point("service").digest}
    assert len(ran.records) == 3
    assert all(r.summary.errors == 0 and r.summary.requests == 640 for r in ran.records)


def test_kv_router_beats_random_on_hits(dynamo_runs) -> None:
    """Hits only: TTFT on the scaled wall clock follows the machine's load (CI measured the KV
    router slower while client-bound); bench/dynamo_routing.py measures TTFT on a quiet one."""
    ran, _ = dynamo_runs
    kv, random = ran.point("dynamo-kv").summary, ran.point("dynamo-random").summary
    assert kv.request_hit_rate > random.request_hit_rate + 0.15


def test_simulator_and_mocker_agree_under_random_routing(dynamo_runs) -> None:
    """Two independent implementations of vLLM's prefix cache, both behind random routing,
    on the same requests: their hit rates agree, and follow min(1, 3.95 / prefixes)."""
    ran, _ = dynamo_runs
    sim = ran.point("service").summary.request_hit_rate
    mocker = ran.point("dynamo-random").summary.request_hit_rate
    assert sim == pytest.approx(mocker, abs=0.06)
    assert sim == pytest.approx(3.95 / 16, abs=0.06)
    assert mocker == pytest.approx(3.95 / 16, abs=0.06)


def test_mockers_hold_what_the_simulated_workers_hold(dynamo_runs) -> None:
    """The simulated workers report their KV size (measured); a mocker reports none, so the
    record keeps the size it was given, which must be the same 9,360 tokens."""
    ran, _ = dynamo_runs
    service = ran.point("service")
    assert len(service.pods) == 4
    assert {p.kv_cache_tokens for p in service.pods} == {9360}
    for arm in DYNAMO_ARMS:
        pods = ran.point(arm).pods
        assert len(pods) == 4
        assert {p.kv_cache_tokens for p in pods} == {None}
        assert {p.configured_kv_cache_tokens for p in pods} == {9360}


def test_each_workers_own_count_matches_the_responses_attributed_to_it(dynamo_runs) -> None:
    """Mockers export no prefix-cache counters, so each worker's figures in the record are the
    responses the frontend attributed to it (nvext worker id). Checked against the mockers'
    own request counters (dynamo_component_requests_total, labelled with the instance id,
    read after the load): worker by worker, a mocker served exactly the requests (warm-up and
    measured) whose responses name it, and the record's figures for that pod are the measured
    responses naming that very worker."""
    ran, scrapes = dynamo_runs
    for arm in DYNAMO_ARMS:
        record = ran.point(arm)
        ok = [r for r in ran.result(record).records() if r.ok]
        own = scrapes.by_arm[arm]
        pods = {p.pod: p for p in record.pods}
        assert set(pods) == set(own) and len(own) == 4
        served = Counter(r.worker_id for r in ok)
        assert set(served) == {c.instance_id for c in own.values()}, "a response named no worker"
        for name, counters in own.items():
            assert counters.instance_id is not None
            assert counters.requests_total == served[counters.instance_id], f"{arm}, {name}"
            mine = [r for r in ok if r.phase == "measured" and r.worker_id == counters.instance_id]
            pod = pods[name]
            assert pod.uid is not None and pod.uid.endswith(f"-{counters.instance_id}")
            assert pod.requests == len(mine) > 0, f"{arm}, {name}"
            assert pod.prefix_cache_queries == sum(r.prompt_tokens or 0 for r in mine)
            assert pod.prefix_cache_hits == sum(r.cached_tokens or 0 for r in mine)
        assert sum(p.requests for p in pods.values()) == 640
        assert record.summary.latency_clock == "scaled"
