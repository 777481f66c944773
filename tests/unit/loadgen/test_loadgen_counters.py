"""Parsing vLLM's /metrics with prometheus_client's parser, and per-pod deltas."""

import pytest

from kvbench.loadgen.counters import PodCounters, parse_metrics, pod_deltas

VLLM_PAGE = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 4742.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 2032.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 4742.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 128.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Qwen/Qwen3-0.6B"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="Qwen/Qwen3-0.6B"} 1.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="Qwen/Qwen3-0.6B"} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-0.6B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-0.6B"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.2
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="585"} 1.0
"""


def test_parse_a_vllm_page() -> None:
    counters = parse_metrics("pod-a", VLLM_PAGE)
    assert counters.values == {
        "prefix_cache_queries": 4742.0,
        "prefix_cache_hits": 2032.0,
        "preemptions": 1.0,
        "prompt_tokens": 4742.0,
        "generation_tokens": 128.0,
        "requests": 2.0,
        "ttft_seconds": 0.2,
        "ttft_count": 2.0,
    }
    assert counters.kv_cache_tokens == 585 * 16


def test_older_names_and_missing_counters() -> None:
    page = 'vllm:gpu_prefix_cache_queries_total{engine="0"} 10\n'
    counters = parse_metrics("old", page)
    assert counters.values["prefix_cache_queries"] == 10.0
    assert counters.values["preemptions"] is None and counters.kv_cache_tokens is None
    assert counters.values["ttft_seconds"] is None


def _pod(name: str, **values: float | None) -> PodCounters:
    base: dict[str, float | None] = dict.fromkeys(
        ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens",
         "generation_tokens", "requests"), 0.0,
    )  # fmt: skip
    base.update(values)
    return PodCounters(pod=name, values=base, kv_cache_tokens=9360)


def test_deltas_per_pod_with_notes() -> None:
    before = {"a": _pod("a", prefix_cache_queries=100), "b": _pod("b", requests=5),
              "gone": _pod("gone")}  # fmt: skip
    after = {
        "a": _pod("a", prefix_cache_queries=350, prefix_cache_hits=200, preemptions=None),
        "b": _pod("b", requests=2),
        "new": _pod("new"),
    }
    pods, notes = pod_deltas(before, after)
    assert [p.pod for p in pods] == ["a", "b"]
    assert pods[0].prefix_cache_queries == 250 and pods[0].prefix_cache_hits == 200
    assert pods[0].kv_cache_tokens == 9360
    assert any("a does not export preemptions" in n for n in notes)
    assert any("b: requests went down" in n for n in notes)
    assert any("gone was read only before" in n for n in notes)
    assert any("new was read only after" in n for n in notes)


def test_the_servers_ttft_histogram_gives_its_mean_over_the_window() -> None:
    """The histogram's sum and count are counters like the others: their deltas give the
    window's own mean, not the mean since the server started."""
    before = {"a": _pod("a", ttft_seconds=5.0, ttft_count=100)}
    after = {"a": _pod("a", ttft_seconds=5.9, ttft_count=110)}
    (pod,), notes = pod_deltas(before, after)
    assert pod.ttft_seconds == pytest.approx(0.9) and pod.ttft_count == 10
    assert pod.server_ttft_mean == pytest.approx(0.09)
    assert notes == []


def test_a_server_without_a_ttft_histogram_has_no_mean_and_no_note() -> None:
    """Dynamo's workers export no TTFT histogram: that is no doubt about the counters."""
    (pod,), notes = pod_deltas({"a": _pod("a")}, {"a": _pod("a", requests=3)})
    assert pod.ttft_seconds is None and pod.server_ttft_mean is None
    assert notes == []
    counted_none = pod_deltas(
        {"a": _pod("a", ttft_seconds=1.0, ttft_count=4)},
        {"a": _pod("a", ttft_seconds=1.0, ttft_count=4)},
    )[0][0]
    assert counted_none.server_ttft_mean is None
