"""Dynamo arms on the local back end: the Service, Dynamo's random router and its KV router
on one seeded request sequence, under cache pressure (16 prefixes over 4 workers that hold
~3.95 requests each, 16 in flight; 640 requests, so that one run's hit rate is within about
two points of its mean: Dynamo's random router is not seeded)."""

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

from kvbench.api import RunRecord, parse_experiment

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dynamo") is None,
    reason="NVIDIA Dynamo is not installed: run scripts/install-dynamo.sh (.ci/run does)",
)


@pytest.fixture(scope="module")
def dynamo_runs(tmp_path_factory, run_local) -> dict[str, RunRecord]:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-dynamo.yaml").read_text())
    document = copy.deepcopy(document)
    document["spec"]["workload"]["sharedPrefix"].update(prefixes=[16], requestsPerPrefix=40)
    document["spec"]["load"]["trials"] = 1
    records = run_local(parse_experiment(document), tmp_path_factory.mktemp("dynamo"))
    return {r.arm: r for r in records}


def test_identical_sequences_and_no_errors(dynamo_runs) -> None:
    assert {r.digest for r in dynamo_runs.values()} == {dynamo_runs["service"].digest}
    assert all(r.summary.errors == 0 and r.summary.requests == 640 for r in dynamo_runs.values())


def test_kv_router_beats_random_on_hits_and_ttft(dynamo_runs) -> None:
    kv, random = dynamo_runs["dynamo-kv"].summary, dynamo_runs["dynamo-random"].summary
    assert kv.request_hit_rate > random.request_hit_rate + 0.15
    assert kv.ttft_p50 < random.ttft_p50


def test_simulator_and_mocker_agree_under_random_routing(dynamo_runs) -> None:
    """Two independent implementations of vLLM's prefix cache, both behind random routing,
    on the same requests: their hit rates agree, and follow min(1, 3.95 / prefixes)."""
    sim = dynamo_runs["service"].summary.request_hit_rate
    mocker = dynamo_runs["dynamo-random"].summary.request_hit_rate
    assert sim == pytest.approx(mocker, abs=0.06)
    assert sim == pytest.approx(3.95 / 16, abs=0.06)
    assert mocker == pytest.approx(3.95 / 16, abs=0.06)


def test_mockers_hold_what_the_simulated_workers_hold(dynamo_runs) -> None:
    for record in dynamo_runs.values():
        assert {p.kv_cache_tokens for p in record.pods} == {9360}
        assert len(record.pods) == 4


def test_per_worker_hits_from_the_frontends_attribution(dynamo_runs) -> None:
    """Mockers export no prefix-cache counters: each worker's figures are the responses the
    frontend attributed to it (nvext worker id), and together they account for every request."""
    for arm in ("dynamo-random", "dynamo-kv"):
        record = dynamo_runs[arm]
        assert sum(p.requests for p in record.pods) == 640
        assert all(p.prefix_cache_queries > 0 for p in record.pods)
        hits = sum(p.prefix_cache_hits for p in record.pods)
        queries = sum(p.prefix_cache_queries for p in record.pods)
        assert record.summary.token_hit_rate == pytest.approx(hits / queries)
        assert record.summary.latency_clock == "scaled"
