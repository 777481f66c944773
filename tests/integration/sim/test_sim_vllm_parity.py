"""The simulator answers bad requests as vLLM 0.31.0 does: one table, vLLM's answer beside
each request, read from vLLM's source (the 0.31.0 wheel; FastAPI 0.136.3 and Starlette 1.x,
the versions it pins). Paths below are in the vllm package unless said otherwise:

- E: serve/exception_handling/error_response.py (a ``VLLMValidationError`` is type
  ``BadRequestError`` with ``param``, its message ends with ``(parameter=..., value=...)``,
  exceptions.py ``VLLMValidationError.__str__``);
- V: serve/exception_handling/handlers/validation.py (FastAPI's ``RequestValidationError``:
  type ``Bad Request``, ``"N validation error(s):"``, ``param`` the first location);
- H: serve/exception_handling/handlers/http.py (Starlette's ``HTTPException``: type and
  message the status phrase);
- S: sampling_params.py ``SamplingParams._verify_args`` / ``_validate_logprobs``;
- P: entrypoints/openai/completion/protocol.py and chat_completion/protocol.py (the
  ``mode="before"`` validators);
- R: renderers/params.py ``TokenizeParams`` (``__post_init__``, ``_token_len_check``);
- I: v1/engine/input_processor.py (``_validate_prompt_len``, the vocabulary check);
- F: fastapi/routing.py ``get_request_handler`` (body decoding) and
  serve/utils/api_utils.py ``validate_json_request``.

The simulator serves Qwen/Qwen3-0.6B (vocabulary 151,936) with ``--max-model-len 4096``.
"""

import json
import socket
from dataclasses import dataclass, field
from typing import Any

import pytest
from sim_http_harness import running_sim

from kvbench.sim.api_models import (
    ChatCompletionResponse,
    CompletionResponse,
    CompletionStreamResponse,
)

JSON = {"Content-Type": "application/json"}
CHAT = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Vllm:
    """vLLM's answer: status, and the error's type, param and message (exact, or its
    beginning when ``prefix``)."""

    status: int
    type: str
    param: str | None
    message: str
    prefix: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    body: dict[str, Any] | bytes | None
    vllm: Vllm
    path: str = "/v1/completions"
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))


def _bad(message: str, param: str | None = None) -> Vllm:
    return Vllm(400, "BadRequestError", param, message)


def _invalid(message: str, param: str | None, prefix: bool = False) -> Vllm:
    return Vllm(400, "Bad Request", param, message, prefix)


MEDIA = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
TOO_LONG = (
    "This model's maximum context length is 4096 tokens. However, you requested 16 output "
    "tokens and your prompt contains {count} input tokens, for a total of {total} tokens. "
    "Please reduce the length of the input prompt or the number of requested output tokens. "
    "(parameter=input_tokens, value={value})"
)

CASES = [
    # S: temperature, top_p and the other sampling parameters
    Case("temperature -1", {"prompt": "hi", "temperature": -1}, _bad(
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
        "temperature")),
    Case("temperature 2.5", {"prompt": "hi", "temperature": 2.5}, _bad(
        "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)",
        "temperature")),
    Case("temperature NaN", b'{"prompt": "hi", "temperature": NaN}', _bad(
        "temperature must be a finite number, got nan. (parameter=temperature, value=nan)",
        "temperature")),
    Case("top_p 7", {"prompt": "hi", "top_p": 7}, _bad(
        "top_p must be in (0, 1], got 7.0. (parameter=top_p, value=7.0)", "top_p")),
    Case("top_p 0", {"prompt": "hi", "top_p": 0}, _bad(
        "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p")),
    Case("top_k -2", {"prompt": "hi", "top_k": -2}, _bad(
        "top_k must be 0 (disable), or at least 1, got -2.")),
    Case("min_p 1.5", {"prompt": "hi", "min_p": 1.5}, _bad("min_p must be in [0, 1], got 1.5.")),
    Case("presence_penalty 3", {"prompt": "hi", "presence_penalty": 3}, _bad(
        "presence_penalty must be in [-2, 2], got 3.0.")),
    Case("repetition_penalty 0", {"prompt": "hi", "repetition_penalty": 0}, _bad(
        "repetition_penalty must be greater than zero, got 0.0.")),
    Case("n 0", {"prompt": "hi", "n": 0}, _bad("n must be at least 1, got 0.")),
    Case("max_tokens 0", {"prompt": "hi", "max_tokens": 0}, _bad(
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens")),
    Case("min_tokens over max_tokens", {"prompt": "hi", "max_tokens": 3, "min_tokens": 5},
         _bad("min_tokens must be less than or equal to max_tokens=3, got 5.")),
    Case("chat temperature -1", {"messages": CHAT, "temperature": -1}, _bad(
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
        "temperature"), path="/v1/chat/completions"),
    # F + V: the body: content type, JSON, types
    Case("text/plain body", b'{"prompt": "hi"}', _invalid(MEDIA, None),
         headers={"Content-Type": "text/plain"}),
    Case("no content type", b'{"prompt": "hi"}', _invalid(MEDIA, None), headers={}),
    Case("content type with spaces", b'{"prompt": "hi"}', _invalid(MEDIA, None),
         headers={"Content-Type": "application/json ; charset=utf-8"}),
    Case("chat text/plain", b"{}", _invalid(MEDIA, None), path="/v1/chat/completions",
         headers={"Content-Type": "text/plain"}),
    Case("tokenize text/plain", b"{}", _invalid(MEDIA, None), path="/tokenize",
         headers={"Content-Type": "text/plain"}),
    Case("bad JSON", b"{not json", _invalid(
        "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON decode "
        "error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting property name "
        "enclosed in double quotes'}}", "body.1")),
    Case("empty body", b"", _invalid(
        "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field required', "
        "'input': 'None'}", "body")),
    Case("not UTF-8", b'{"prompt": "\xff"}', Vllm(
        400, "Bad Request", None, "There was an error parsing the body")),
    Case("temperature not a number", {"prompt": "hi", "temperature": "hot"}, _invalid(
        "1 validation error:\n  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': "
        "'Input should be a valid number, unable to parse string as a number', 'input': "
        "'hot'}", "body.temperature")),
    Case("negative token id", {"prompt": [-1]}, _invalid(
        "4 validation errors:\n  {'type': 'greater_than_equal', 'loc': 'body.prompt.0'",
        "body.prompt.0", prefix=True)),
    # P: the request models' before-validators
    Case("stream_options without stream", {"prompt": "hi", "stream_options": {
        "include_usage": True}}, _bad(
        "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
        "stream_options")),
    Case("no prompt", {"max_tokens": 3}, _bad(
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
        "prompt")),
    Case("empty text prompt", {"prompt": ""}, _bad(
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
        "prompt")),
    Case("logprobs -2", {"prompt": "hi", "logprobs": -2}, _bad(
        "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-2)",
        "logprobs")),
    Case("logprobs not a number", {"prompt": "hi", "logprobs": "many"}, _bad(
        "`logprobs` must be an integer. (parameter=logprobs, value=many)", "logprobs")),
    Case("prompt_logprobs when streaming", {"prompt": "hi", "prompt_logprobs": 1,
         "stream": True}, _bad("`prompt_logprobs` are not available when `stream=True`. "
         "(parameter=prompt_logprobs)", "prompt_logprobs")),
    Case("chat top_logprobs without logprobs", {"messages": CHAT, "top_logprobs": 2}, _bad(
        "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
        "top_logprobs"), path="/v1/chat/completions"),
    Case("chat top_logprobs -3", {"messages": CHAT, "logprobs": True, "top_logprobs": -3},
         _bad("`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, "
              "value=-3)", "top_logprobs"), path="/v1/chat/completions"),
    # serve/engine/serving.py _check_model
    Case("unknown model", {"prompt": "hi", "model": "nope"}, Vllm(
        404, "NotFoundError", "model", "The model `nope` does not exist.")),
    # R: lengths
    Case("max_tokens over the context", {"prompt": "hi", "max_tokens": 5000}, _bad(
        "max_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer "
        "output tokens. (parameter=max_tokens, value=5000)", "max_tokens")),
    Case("chat max_completion_tokens over the context", {"messages": CHAT,
         "max_completion_tokens": 5000}, _bad(
        "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request "
        "fewer output tokens. (parameter=max_completion_tokens, value=5000)",
        "max_completion_tokens"), path="/v1/chat/completions"),
    Case("token ids too long", {"prompt": [7] * 4090}, _bad(
        TOO_LONG.format(count=4090, total=4106, value=4090), "input_tokens")),
    # (text is tokenized with max_length one past the limit, hence "at least"; vLLM's
    # character pre-check, len(text) > 4080 x the tokenizer's longest token, does not apply)
    Case("text too long", {"prompt": "word " * 5000}, _bad(
        TOO_LONG.format(count="at least 4081", total="at least 4097", value=4081),
        "input_tokens")),
    # I and S._validate_logprobs (non-streaming: a 400; streaming: see below)
    Case("empty token prompt", {"prompt": []}, _bad("The decoder prompt cannot be empty")),
    Case("token id out of vocabulary", {"prompt": [151936]}, _bad(
        "Token id 151936 is out of vocabulary")),
    Case("logprobs 21", {"prompt": "hi", "logprobs": 21}, _bad(
        "Requested sample logprobs of 21, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=21)", "logprobs")),
    Case("logprobs -1 (the vocabulary)", {"prompt": "hi", "logprobs": -1}, _bad(
        "Requested sample logprobs of 151936, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=151936)", "logprobs")),
    Case("chat top_logprobs 21", {"messages": CHAT, "logprobs": True, "top_logprobs": 21},
         _bad("Requested sample logprobs of 21, which is greater than max allowed: 20 "
              "(parameter=logprobs, value=21)", "logprobs"), path="/v1/chat/completions"),
    # H: routing
    Case("unknown path", None, Vllm(404, "Not Found", None, "Not Found"), path="/v2/nope",
         method="GET"),
    Case("wrong method", None, Vllm(405, "Method Not Allowed", None, "Method Not Allowed"),
         method="GET"),
]  # fmt: skip


@pytest.fixture(scope="module")
def sim():
    with running_sim() as s:
        yield s


def _send(sim, case: Case):
    content = json.dumps(case.body).encode() if isinstance(case.body, dict) else case.body
    return sim.client.request(
        case.method, sim.url + case.path, content=content, headers=case.headers
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_errors_match_vllm(sim, case: Case):
    r = _send(sim, case)
    assert r.headers["content-type"] == "application/json"
    ours = r.json()["error"]
    want = case.vllm
    assert (r.status_code, ours["code"], ours["type"], ours["param"]) == (
        want.status, want.status, want.type, want.param
    )  # fmt: skip
    if want.prefix:
        assert ours["message"].startswith(want.message), ours["message"]
    else:
        assert ours["message"] == want.message
    assert set(r.json()) == {"error"} and set(ours) == {"message", "type", "param", "code"}


def _events(sim, path: str, body: dict) -> list:
    r = sim.client.post(sim.url + path, json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    data = [line[6:] for line in r.text.split("\n") if line.startswith("data: ")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


def test_an_input_error_of_a_stream_is_an_event_after_a_200(sim):
    """vLLM checks logprobs and token ids inside generate(), which a streaming response
    runs after its 200: the completion stream generator sends the error as an event."""
    for body in ({"prompt": "hi", "logprobs": 21}, {"prompt": [151936]}):
        events = _events(sim, "/v1/completions", body | {"stream": True})
        assert events[-1] == "[DONE]" and len(events) == 2
        assert events[0]["error"]["type"] == "BadRequestError"
        assert events[0]["error"]["code"] == 400


def test_completion_logprobs_in_vllms_shape(sim):
    """CompletionLogProbs: one entry per token; each top_logprobs holds the sampled token
    and the other top entries (``logprobs`` of them, the sampled token among them)."""
    r = sim.post("/v1/completions", {"prompt": "hi", "max_tokens": 5, "logprobs": 3})
    choice = CompletionResponse.model_validate(r.json()).choices[0]
    lp = choice.logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == 5
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]
    for token, top in zip(lp.tokens, lp.top_logprobs, strict=True):
        assert top is not None and len(top) == 3 and top[token] == 0.0
        assert sorted(top.values()) == [-9999.0, -9999.0, 0.0]
    plain = sim.post("/v1/completions", {"prompt": "hi", "max_tokens": 5}).json()
    assert plain["choices"][0]["logprobs"] is None


def test_chat_logprobs_in_vllms_shape(sim):
    body = {"messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": 2}
    r = sim.post("/v1/chat/completions", body)
    choice = ChatCompletionResponse.model_validate(r.json()).choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert "".join(c.token for c in content) == choice.message.content and len(content) == 4
    for entry in content:
        assert entry.logprob == 0.0 and entry.bytes == list(entry.token.encode())
        first, other = entry.top_logprobs
        assert (first.token, first.logprob, other.logprob) == (entry.token, 0.0, -9999.0)
        assert other.token != entry.token
    none = sim.post("/v1/chat/completions", body | {"top_logprobs": 0}).json()
    assert all(c["top_logprobs"] == [] for c in none["choices"][0]["logprobs"]["content"])


def test_streamed_logprobs_cover_each_chunk(sim):
    events = _events(sim, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "stream": True,
                                                "logprobs": 1})  # fmt: skip
    chunks = [CompletionStreamResponse.model_validate(e) for e in events[:-1]]
    offset = 0
    for chunk in chunks:
        lp = chunk.choices[0].logprobs
        assert lp is not None and lp.tokens == [chunk.choices[0].text]
        assert lp.text_offset == [offset] and lp.top_logprobs == [{lp.tokens[0]: 0.0}]
        offset += len(chunk.choices[0].text)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_stats_put_usage_in_every_chunk(sim, path):
    """vLLM (serve/utils/api_utils.py should_include_usage): with include_usage and
    continuous_usage_stats every chunk carries the usage so far; without include_usage,
    continuous_usage_stats is ignored."""
    request = {"max_tokens": 5, "stream": True}
    request |= {"messages": CHAT} if "chat" in path else {"prompt": "count me"}
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = _events(sim, path, request | {"stream_options": options})
    *chunks, final, done = events
    assert done == "[DONE]" and final["choices"] == []
    prompt = final["usage"]["prompt_tokens"]
    completion = [c["usage"]["completion_tokens"] for c in chunks]
    assert completion == ([0] if "chat" in path else []) + [1, 2, 3, 4, 5]
    assert all(c["usage"]["prompt_tokens"] == prompt for c in chunks)
    assert all(c["usage"]["total_tokens"] == prompt + c["usage"]["completion_tokens"]
               for c in chunks)  # fmt: skip
    ignored = _events(sim, path, request | {"stream_options": {"continuous_usage_stats": True}})
    assert all(e["usage"] is None for e in ignored[:-1])


def test_a_supported_json_content_type_with_parameters_is_accepted(sim):
    r = sim.client.post(
        sim.url + "/v1/completions", content=b'{"prompt": "hi", "max_tokens": 2}',
        headers={"Content-Type": "Application/JSON; charset=utf-8"},
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("head", "status", "err_type", "fragment"),
    [
        ("Content-Length: 5000000", 413, "Request Entity Too Large", "--max-request-body-bytes"),
        ("Content-Length: 100", 408, "Request Timeout", "did not arrive within 0.5 s"),
    ],
)
def test_refusals_vllm_does_not_make_keep_its_error_shape(head, status, err_type, fragment):
    """vLLM reads any body and waits for it forever (uvicorn and FastAPI set no limit); the
    simulator refuses a body over --max-request-body-bytes (413) or one that has not come
    --request-body-timeout after its headers (408), typed with the status phrase as vLLM's
    HTTPException handler types a status."""
    with running_sim(request_body_timeout=0.5) as sim:
        port = int(sim.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                f"POST /v1/completions HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n"
                f"{head}\r\n\r\n".encode()
            )
            data = b""
            while not data.endswith(b"}}"):
                chunk = sock.recv(4096)
                assert chunk
                data += chunk
        head_bytes, body = data.split(b"\r\n\r\n", 1)
        assert head_bytes.split(b" ")[1] == str(status).encode()
        err = json.loads(body)["error"]
        assert (err["type"], err["param"], err["code"]) == (err_type, None, status)
        assert fragment in err["message"] and set(err) == {"message", "type", "param", "code"}
