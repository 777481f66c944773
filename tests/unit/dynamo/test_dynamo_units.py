"""kvbench.dynamo without processes: model directory, capacity, metrics and nvext parsing,
router flags, discovery files, the shared-prefix sequence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from kvbench.dynamo import (
    NvextWorker,
    RouterOptions,
    ensure_model_dir,
    mocker_blocks_for_bytes,
    parse_worker_metrics,
)
from kvbench.dynamo.capacity import KVGeometry
from kvbench.dynamo.environment import dynamo_env, registered_instance_ids
from kvbench.dynamo.model_dir import ModelDirSpec
from kvbench.dynamo.nvext import RequestOutcome, outcome_from_chunks, sse_data
from kvbench.dynamo.routing_check import SequenceSpec, shared_prefix_prompts, summarize

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

STREAM = [
    'data: {"choices":[{"text":" vh","index":0}],"usage":null,"nvext":{"worker_id":'
    '{"prefill_worker_id":7169493343107499997,"prefill_dp_rank":0,'
    '"decode_worker_id":7169493343107499997,"decode_dp_rank":0}}}',
    "",
    'data: {"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":null,'
    '"nvext":{"timing":{"request_received_ms":1795947348158,"prefill_wait_time_ms":0.25,'
    '"prefill_time_ms":2.75,"ttft_ms":3.0,"total_time_ms":4.05,"kv_hit_rate":0.67,'
    '"router_queue_depth":0}}}',
    'data: {"choices":[],"usage":{"prompt_tokens":34,"completion_tokens":3,'
    '"total_tokens":37,"prompt_tokens_details":{"audio_tokens":null,"cached_tokens":32}}}',
    "data: [DONE]",
    'data: {"never":"read"}',
]


def test_one_gib_on_qwen3_is_585_blocks_of_16() -> None:
    assert mocker_blocks_for_bytes(GIB) == 585
    assert mocker_blocks_for_bytes(2 * GIB) == 1170
    assert mocker_blocks_for_bytes(GIB, block_size=32) == 292
    fp8 = KVGeometry(num_layers=28, num_kv_heads=8, head_dim=128, dtype_bytes=1)
    assert mocker_blocks_for_bytes(GIB, geometry=fp8) == 1170
    with pytest.raises(ValueError):
        mocker_blocks_for_bytes(0)


def test_model_dir_is_deterministic_cached_and_qwen3_shaped(tmp_path: Path) -> None:
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
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (28, 8)
    assert (config["head_dim"], config["torch_dtype"]) == (128, "bfloat16")
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


def test_nvext_stream_gives_worker_timing_and_cached_tokens() -> None:
    outcome = outcome_from_chunks(sse_data(STREAM))
    assert outcome.chunks == 3 and outcome.text == " vh"
    assert outcome.worker_id == 7169493343107499997
    assert (outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens) == (34, 3, 32)
    assert outcome.timing is not None and outcome.timing.kv_hit_rate == 0.67
    assert outcome_from_chunks([{"choices": []}]).worker_id is None


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


def test_shared_prefix_sequence_and_summary() -> None:
    spec = SequenceSpec(seed=1, prefixes=3, requests_per_prefix=4, prefix_tokens=32)
    sequence = shared_prefix_prompts(spec)
    assert sequence == shared_prefix_prompts(spec)
    assert sequence != shared_prefix_prompts(spec.model_copy(update={"seed": 2}))
    assert sorted(group for group, _ in sequence) == [0] * 4 + [1] * 4 + [2] * 4
    by_group = {group: prompt[:32] for group, prompt in sequence}
    assert all(prompt[:32] == by_group[group] for group, prompt in sequence)
    assert all(len(prompt) == 32 + spec.suffix_tokens for _, prompt in sequence)

    def served(worker: int, cached: int) -> RequestOutcome:
        return RequestOutcome(
            chunks=1,
            text="",
            prompt_tokens=64,
            completion_tokens=1,
            cached_tokens=cached,
            worker=NvextWorker(prefill_worker_id=worker, decode_worker_id=worker),
            timing=None,
        )

    summary = summarize([0, 0, 1], [served(5, 0), served(5, 48), served(9, 0)])
    assert summary.hit_rate == 48 / 192
    assert [(w.instance_id, w.requests, w.groups) for w in summary.workers] == [
        (5, 2, 1),
        (9, 1, 1),
    ]
