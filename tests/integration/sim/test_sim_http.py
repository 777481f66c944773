"""The simulator's HTTP API over real loopback connections."""

import concurrent.futures

import pytest
from sim_http_harness import running_sim

from kvbench.sim.api_models import (
    ChatCompletionResponse,
    CompletionResponse,
    CompletionStreamResponse,
    ErrorResponse,
)


@pytest.fixture(scope="module")
def sim():
    with running_sim(enable_prompt_tokens_details=True) as s:
        yield s


PREFIX = "shared system prompt " * 120


def test_completion_body_usage_and_timings(sim):
    r = sim.post(
        "/v1/completions", {"model": "Qwen/Qwen3-0.6B", "prompt": "hello", "max_tokens": 7}
    )
    assert r.status_code == 200
    body = CompletionResponse.model_validate(r.json())
    assert body.choices[0].finish_reason == "length"
    assert body.usage.completion_tokens == 7
    assert body.usage.total_tokens == body.usage.prompt_tokens + 7
    t = body.kvbench
    assert t.worker == "sim-test" and t.time_scale == 0.0
    assert len(t.token_times) == 7 and t.token_times == sorted(t.token_times)
    assert t.arrival_time < t.first_scheduled_time < t.first_token_time == t.token_times[0]
    assert t.finish_time == t.token_times[-1]


def test_cached_tokens_match_the_prefix_cache_metrics(sim):
    queries0 = sim.metric("vllm:prefix_cache_queries_total")
    hits0 = sim.metric("vllm:prefix_cache_hits_total")
    cached, prompt = [], 0
    for tail in ("first question", "second question", "third question"):
        r = sim.post("/v1/completions", {"prompt": PREFIX + tail, "max_tokens": 2})
        usage = r.json()["usage"]
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        prompt += usage["prompt_tokens"]
    assert cached[0] == 0 and cached[1] == cached[2] > 0 and cached[1] % 16 == 0
    assert sim.metric("vllm:prefix_cache_hits_total") - hits0 == sum(cached)
    assert sim.metric("vllm:prefix_cache_queries_total") - queries0 == prompt


def test_token_id_prompts_and_greedy_determinism(sim):
    body = {"prompt": list(range(1000, 1100)), "max_tokens": 5, "temperature": 0}
    a, b = sim.post("/v1/completions", body).json(), sim.post("/v1/completions", body).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["usage"]["prompt_tokens"] == 100
    assert b["kvbench"]["cached_tokens"] == 96


def test_streamed_completion_with_usage(sim):
    events = sim.stream(
        "/v1/completions",
        {"prompt": "stream me", "max_tokens": 5, "stream": True,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    assert events[-1] == "[DONE]"
    chunks = [CompletionStreamResponse.model_validate(e) for e in events[:-1]]
    content, final = chunks[:-1], chunks[-1]
    assert len(content) == 5
    assert all(c.usage is None and c.kvbench is None for c in content)
    assert [c.choices[0].finish_reason for c in content] == [None] * 4 + ["length"]
    assert final.choices == [] and final.usage.completion_tokens == 5
    assert len(final.kvbench.token_times) == 5


def test_streamed_chat_without_usage_puts_timings_on_the_last_chunk(sim):
    events = sim.stream(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True},
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(chunks) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len(chunks[-1]["kvbench"]["token_times"]) == 4
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert text


def test_chat_completion_body(sim):
    r = sim.post(
        "/v1/chat/completions",
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": [{"type": "text", "text": "hello"}]}],
         "max_completion_tokens": 3},
    )  # fmt: skip
    body = ChatCompletionResponse.model_validate(r.json())
    assert body.choices[0].message.role == "assistant"
    assert body.usage.completion_tokens == 3


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"prompt": "x", "model": "nope"}, 404, "does not exist"),
        ({"prompt": "word " * 5000}, 400, "maximum context length is 4096 tokens"),
        ({"prompt": "hello", "max_tokens": 5000}, 400, "cannot be greater than max_model_len=4096"),
        ({"prompt": "hello", "n": 2}, 400, "n=1"),
        ({"prompt": []}, 400, "empty"),
        ({"prompt": [10**9]}, 400, "vocabulary"),
        ({"max_tokens": 3}, 400, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ],
)
def test_bad_requests_get_vllm_shaped_errors(sim, body, status, fragment):
    if isinstance(body, bytes):
        r = sim.client.post(sim.url + "/v1/completions", content=body)
    else:
        r = sim.post("/v1/completions", body)
    assert r.status_code == status
    err = ErrorResponse.model_validate(r.json()).error
    assert err.code == status and fragment in err.message
    assert err.type == ("NotFoundError" if status == 404 else "BadRequestError")
    assert sim.get("/health").status_code == 200


def test_models_version_and_health(sim):
    models = sim.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["Qwen/Qwen3-0.6B"]
    assert models["data"][0]["max_model_len"] == 4096
    version = sim.get("/version").json()
    info = version["kvbench_sim"]
    assert version["version"].startswith("0.")
    assert info["num_gpu_blocks"] == 585 and info["block_size"] == 16
    assert info["kv_cache_tokens"] == 9360 and info["time_scale"] == 0.0
    assert info["profile"] == "qwen3-0.6b-24gb" and info["seed"] == 0


def test_metrics_names_types_and_labels(sim):
    sim.post("/v1/completions", {"prompt": "metrics please", "max_tokens": 3})
    text = sim.get("/metrics").text
    for line in (
        "# TYPE vllm:prefix_cache_queries_total counter",
        "# TYPE vllm:prefix_cache_hits_total counter",
        "# TYPE vllm:num_preemptions_total counter",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        "# TYPE vllm:num_requests_running gauge",
        "# TYPE vllm:num_requests_waiting gauge",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        "# TYPE vllm:prompt_tokens_total counter",
        "# TYPE vllm:generation_tokens_total counter",
        "# TYPE vllm:request_success_total counter",
    ):
        assert line in text
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="2560.0",' in text
    assert 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="7680.0",' in text
    assert 'model_name="Qwen/Qwen3-0.6B"' in text
    info = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    assert 'num_gpu_blocks="585"' in info and 'block_size="16"' in info
    assert sim.metric("vllm:request_success_total") >= 1
    assert sim.metric("vllm:generation_tokens_total") >= 3


def test_reset_prefix_cache_needs_dev_mode(sim):
    assert sim.post("/reset_prefix_cache", {}).status_code == 404
    with running_sim(dev_mode=True, enable_prompt_tokens_details=True) as dev:
        body = {"prompt": PREFIX + "again", "max_tokens": 2}
        dev.post("/v1/completions", body)
        assert dev.post("/v1/completions", body).json()["kvbench"]["cached_tokens"] > 0
        assert dev.post("/reset_prefix_cache", {}).status_code == 200
        assert dev.post("/v1/completions", body).json()["kvbench"]["cached_tokens"] == 0


def test_concurrent_streams_all_complete(sim):
    body = {"prompt": "parallel", "max_tokens": 20, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip

    def one(i):
        events = sim.stream("/v1/completions", body | {"prompt": f"parallel {i}"})
        return events[-2]["usage"]["completion_tokens"]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert list(pool.map(one, range(48))) == [20] * 48
    assert sim.metric("vllm:num_requests_running") == 0
