"""Dynamo front ends: the worker id per request, per-pod figures from the responses when the
workers export no prefix-cache counters, and latencies scaled back to the engine's clock."""

import json

import pytest

from kvbench.loadgen.attribution import attribute_responses
from kvbench.loadgen.client import Attempt, _parse_event, _read_worker, encode_body
from kvbench.loadgen.counters import PodCounters, PodDelta
from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.summary import summarize_records
from kvbench.loadgen.workload import Request

REQUEST = Request(phase="measured", index=0, prompt=(1, 2, 3), prompt_tokens=3, max_tokens=4)


def test_bodies_ask_for_the_worker_only_for_dynamo() -> None:
    plain = json.loads(encode_body(REQUEST, "m", "completions"))
    dynamo = json.loads(encode_body(REQUEST, "m", "completions", nvext=True))
    assert "nvext" not in plain
    assert dynamo["nvext"] == {"extra_fields": ["worker_id"]}


def test_the_worker_id_comes_from_token_chunks_or_the_last_chunk() -> None:
    token = {"choices": [{"text": "a"}], "usage": None,
             "nvext": {"worker_id": {"prefill_worker_id": 42, "decode_worker_id": 42}}}  # fmt: skip
    attempt = Attempt(REQUEST, "e", 0.0)
    _read_worker(json.dumps(token).encode(), attempt)
    assert attempt.worker_id == 42
    final = Attempt(REQUEST, "e", 0.0)
    _parse_event(json.dumps({"choices": [], "usage": {"prompt_tokens": 3},
                             "nvext": {"worker_id": {"prefill_worker_id": 7}}}).encode(),
                 0.0, final)  # fmt: skip
    assert final.worker_id == 7


def _record(worker: int | None, cached: int, phase: str = "measured") -> RequestRecord:
    return RequestRecord(phase=phase, index=0, endpoint="e", due=0, start=0, end=1, ttft=0.01,
                         e2e=0.1, prompt_tokens=100, output_tokens=4, cached_tokens=cached,
                         worker_id=worker)  # fmt: skip


def test_pods_without_counters_get_the_responses_attributed_to_them() -> None:
    none = dict.fromkeys(("prefix_cache_queries", "prefix_cache_hits", "requests"))
    before = {
        "dyn-0": PodCounters(pod="dyn-0", values=none),
        "vllm-0": PodCounters(pod="vllm-0", values={"prefix_cache_queries": 5.0,
                                                    "prefix_cache_hits": 1.0, "requests": 1.0}),
    }  # fmt: skip
    pods = [PodDelta(pod="dyn-0"), PodDelta(pod="vllm-0", prefix_cache_queries=50)]
    records = [_record(11, 96), _record(11, 0), _record(11, 96, phase="warmup"), _record(99, 0)]
    out, notes = attribute_responses(pods, before, records, {"dyn-0": 11, "vllm-0": 12})
    dyn, vllm = out
    assert (dyn.prefix_cache_queries, dyn.prefix_cache_hits, dyn.requests) == (200, 96, 2)
    assert dyn.generation_tokens == 8
    assert vllm.prefix_cache_queries == 50, "real counters are kept"
    assert any("1 responses named a worker id of no known pod" in n for n in notes)
    assert any("dyn-0 exports no prefix-cache counters" in n for n in notes)


def test_a_sped_up_engine_without_a_clock_is_reported_on_wall_over_scale() -> None:
    records = [_record(1, 0) for _ in range(3)]
    wall = summarize_records(records, None, 1.0)
    scaled = summarize_records(records, None, 1.0, scaled_by=0.05)
    assert wall.latency_clock == "wall" and wall.simulated is None
    assert scaled.latency_clock == "scaled"
    assert scaled.simulated.ttft.p50 == pytest.approx(0.2)
    assert scaled.simulated.requests_per_second == pytest.approx(0.15)
    assert summarize_records(records, None, 1.0, scaled_by=1.0).latency_clock == "wall"
