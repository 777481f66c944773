"""kvbench.dynamo without processes: model directory, metrics parsing, router flags,
discovery files, the shared-prefix sequence and its summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from kvbench.dynamo import (
    ModelDirSpec,
    RouterOptions,
    ensure_model_dir,
    mocker_kv_blocks,
    parse_worker_metrics,
)
from kvbench.dynamo.environment import dynamo_env, registered_instance_ids
from kvbench.dynamo.routing_check import SequenceSpec, summarize_routing
from kvbench.loadgen.records import RequestRecord
from kvbench.sim.geometry import resolve_geometry

GIB = 1 << 30

WORKER_METRICS = """\
# TYPE dynamo_component_requests_total counter
dynamo_component_requests_total{dynamo_component="backend",dynamo_endpoint="generate",\
dynamo_namespace="dynamo",worker_id="637f2835bf7347dd"} 7
dynamo_component_requests_total{dynamo_component="backend",\
dynamo_endpoint="worker_kv_query_source_2a",dynamo_namespace="dynamo",\
worker_id="637f2835bf7347dd"} 1
# TYPE dynamo_component_inflight_requests gauge
dynamo_component_inflight_requests{dynamo_component="backend",dynamo_endpoint="generate",\
dynamo_namespace="dynamo",worker_id="637f2835bf7347dd"} 2
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="qwen3-mock"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-mock"} 0.25
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 7
vllm:time_to_first_token_seconds_sum{engine="0"} 0.7
vllm:time_to_first_token_seconds_count{engine="0"} 7
"""


def test_model_dir_is_deterministic_and_cached(tmp_path: Path) -> None:
    spec = ModelDirSpec(seed=3, vocab_size=2048)
    first = ensure_model_dir(tmp_path / "a", spec)
    again = ensure_model_dir(tmp_path / "a", spec)
    other = ensure_model_dir(tmp_path / "b", spec)
    reseeded = ensure_model_dir(tmp_path / "c", ModelDirSpec(seed=4, vocab_size=2048))
    assert again.path == first.path
    tokenizer_bytes = (first.path / "tokenizer.json").read_bytes()
    assert (other.path / "tokenizer.json").read_bytes() == tokenizer_bytes
    assert (reseeded.path / "tokenizer.json").read_bytes() != tokenizer_bytes
    assert [p.name for p in (tmp_path / "a").iterdir()] == [first.path.name]

    config = json.loads(first.config_path.read_text())
    tokenizer = Tokenizer.from_file(str(first.path / "tokenizer.json"))
    assert config["vocab_size"] == tokenizer.get_vocab_size() == first.vocab_size == 2048
    assert config["eos_token_id"] == tokenizer.token_to_id("<|im_end|>")
    tokenizer_config = json.loads((first.path / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tokenizer_config["chat_template"]
    ids = tokenizer.encode("any text at all, even ünïcode").ids
    assert tokenizer.decode(ids) == "any text at all, even ünïcode"


def test_worker_metrics_give_instance_id_and_counters() -> None:
    counters = parse_worker_metrics(WORKER_METRICS)
    assert counters.instance_id == 7169493343107499997
    assert counters.requests_total == 7
    assert (counters.inflight_requests, counters.preemptions_total) == (2, 3)
    assert (counters.kv_cache_usage, counters.ttft_count) == (0.25, 7)
    later = counters.model_copy(update={"requests_total": 10.0, "kv_cache_usage": 0.5})
    delta = later.minus(counters)
    assert (delta.requests_total, delta.preemptions_total, delta.kv_cache_usage) == (3, 0, 0.5)


def test_router_flags() -> None:
    kv = RouterOptions(mode="kv", overlap_score_credit=2.0, temperature=0.5, kv_events=False)
    assert kv.argv() == [
        "--router-mode",
        "kv",
        "--router-kv-overlap-score-credit",
        "2.0",
        "--router-temperature",
        "0.5",
        "--no-router-kv-events",
    ]
    assert RouterOptions(mode="random", temperature=0.5).argv() == ["--router-mode", "random"]


def test_environment_is_loopback_file_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYN_ROUTER_MODE", "kv")
    env = dynamo_env(tmp_path)
    assert "DYN_ROUTER_MODE" not in env
    assert env["DYN_DISCOVERY_BACKEND"] == "file"
    assert env["DYN_FILE_KV"] == str(tmp_path / "discovery")
    hosts = ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_SYSTEM_HOST")
    assert {env[name] for name in hosts} == {"127.0.0.1"}
    instances = tmp_path / "discovery" / "v1" / "instances"
    instances.mkdir(parents=True)
    for name in (
        "dynamo%2Fbackend%2Fgenerate%2F637f2835bf7347dd",
        "dynamo%2Fbackend%2Fworker%5Fkv%5Fquery%5Fsource%5F2a%2F637f2835bf7347dd",
    ):
        (instances / name).write_text("{}")
    assert registered_instance_ids(tmp_path) == {0x637F2835BF7347DD}


def test_model_dir_config_has_the_served_models_kv_geometry(tmp_path: Path) -> None:
    """The mocker sizes its KV bytes per token from config.json: it must be the engine's model."""
    kv_fields = ("num_layers", "num_kv_heads", "head_dim", "dtype")
    for model in ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B", "meta-llama/Llama-3.2-1B"):
        expected = resolve_geometry(model)
        path = ensure_model_dir(tmp_path, ModelDirSpec(vocab_size=2048, geometry=expected)).path
        written = resolve_geometry(str(path))
        assert [getattr(written, f) for f in kv_fields] == [getattr(expected, f) for f in kv_fields]
        assert mocker_kv_blocks(str(path), GIB) == mocker_kv_blocks(model, GIB)
    assert len(list(tmp_path.iterdir())) == 3


def test_shared_prefix_sequence_is_the_load_generators() -> None:
    spec = SequenceSpec(seed=1, prefixes=3, requests_per_prefix=4, prefix_tokens=32)
    requests = spec.requests()
    assert [r.index for r in requests] == list(range(12))
    assert sorted(r.group for r in requests) == [0] * 4 + [1] * 4 + [2] * 4
    heads = {r.group: r.prompt[:32] for r in requests}
    assert len(set(heads.values())) == 3
    assert all(r.prompt[:32] == heads[r.group] for r in requests)
    assert len({r.prompt[32:] for r in requests}) == 12
    assert all(len(r.prompt) == r.prompt_tokens == 32 + spec.suffix_tokens for r in requests)
    assert all(1000 <= token < 30000 for r in requests for token in r.prompt)
    assert {r.max_tokens for r in requests} == {spec.max_tokens}
    reseeded = SequenceSpec(seed=2, prefixes=3, requests_per_prefix=4, prefix_tokens=32)
    assert [r.prompt for r in reseeded.requests()] != [r.prompt for r in requests]


def record(index: int, group: int, worker: int | None, cached: int, ttft: float) -> RequestRecord:
    return RequestRecord(
        phase="measured",
        index=index,
        group=group,
        endpoint="http://frontend/v1/completions",
        due=0.0,
        start=0.0,
        end=1.0,
        ttft=ttft,
        prompt_tokens=64,
        output_tokens=1,
        cached_tokens=cached,
        worker_id=worker,
        status=200,
    )


def test_routing_summary_splits_by_the_reported_worker() -> None:
    summary = summarize_routing(
        [record(0, 0, 5, 0, 0.010), record(1, 0, 5, 48, 0.020), record(2, 1, 9, 0, 0.030)]
    )
    assert summary.requests == 3
    assert summary.hit_rate == 48 / 192
    assert summary.mean_ttft_ms == pytest.approx(20.0)
    assert [(w.instance_id, w.requests, w.groups, w.cached_tokens) for w in summary.workers] == [
        (5, 2, 1, 48),
        (9, 1, 1, 0),
    ]
    with pytest.raises(ValueError, match="worker_id"):
        summarize_routing([record(0, 0, None, 0, 0.01)])
    failed = record(0, 0, 5, 0, 0.01).model_copy(update={"error_kind": "http"})
    with pytest.raises(ValueError, match="failed"):
        summarize_routing([failed])
