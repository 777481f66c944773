"""The load generator against servers that answer badly: each bad answer is a record with
its error kind (never dropped, never a success), the run goes on, and the summary counts it.

Every third request (arrival n % 3 == 0, so 4 of the 12 measured ones at concurrency 1) gets
the bad answer; the others get a well-formed stream.
"""

import json
import time
from collections.abc import Callable

import pytest
from fake_openai import Behaviour
from loadgen_helpers import small_config

from kvbench.loadgen.client import MAX_EVENT_BYTES
from kvbench.loadgen.measure import run_sync

WARMUPS, MEASURED = 3, 12
BAD_MEASURED = sum(1 for n in range(WARMUPS, WARMUPS + MEASURED) if n % 3 == 0)

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
END = b"0\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _token(i: int) -> bytes:
    return _event({"id": "c", "choices": [{"index": 0, "text": f" t{i}"}], "usage": None})


def _good(body: dict) -> list[bytes | float]:
    tokens = body["max_tokens"]
    usage = {"prompt_tokens": 80, "completion_tokens": tokens, "total_tokens": 80 + tokens}
    events = [_token(i) for i in range(tokens)]
    events += [_event({"id": "c", "choices": [], "usage": usage}), b"data: [DONE]\n\n"]
    return [SSE_HEAD, *(_chunk(e) for e in events), END]


def _plain(status: str, content_type: str, body: bytes) -> list[bytes | float]:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return [head.encode(), body]


BAD: dict[str, tuple[Callable[[], list[bytes | float]], str, str]] = {
    # name: (the bad answer, the error kind, a fragment of the recorded error)
    "closed mid-chunk": (
        lambda: [SSE_HEAD, _chunk(_token(0)), b"40\r\ndata: {\"id\":\"c\",\"cho"],
        "disconnected", "payload",
    ),
    "closed between chunks": (
        lambda: [SSE_HEAD, _chunk(_token(0)), _chunk(_token(1))], "disconnected", "payload",
    ),
    "body shorter than its Content-Length": (
        lambda: [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Content-Length: 1000\r\n\r\n" + _token(0)],
        "disconnected", "payload",
    ),
    "stream cut inside an event, then ended": (
        lambda: [SSE_HEAD, _chunk(_token(0)), _chunk(b'data: {"id":"c","choices":[{"ind'), END],
        "incomplete", "[DONE]",
    ),
    "truncated JSON in a token chunk": (
        lambda: [SSE_HEAD, _chunk(_token(0)[:-3] + b"\n\n"), _chunk(b"data: [DONE]\n\n"), END],
        "malformed", "not JSON",
    ),
    "not JSON": (
        lambda: [SSE_HEAD, _chunk(b"data: hello there\n\n"), END], "malformed", "not JSON",
    ),
    "JSON that is not an object": (
        lambda: [SSE_HEAD, _chunk(b"data: [1, 2]\n\n"), END], "malformed", "not a JSON object",
    ),
    "one endless event": (
        lambda: [SSE_HEAD, *[_chunk(b"data: " + b"x" * (1 << 20))] * 20, END],
        "malformed", f"more than {MAX_EVENT_BYTES} bytes",
    ),
    "stall mid-stream": (
        lambda: [SSE_HEAD, _chunk(_token(0)), _chunk(_token(1)), 3600.0], "timeout", "timed out",
    ),
    "HTTP 500 with a JSON error": (
        lambda: _plain("500 Internal Server Error", "application/json",
                       b'{"error": {"message": "engine died", "code": 500}}'),
        "http", "engine died",
    ),
    "HTTP 502 with an HTML page": (
        lambda: _plain("502 Bad Gateway", "text/html", b"<html><h1>502 Bad Gateway</h1></html>"),
        "http", "HTTP 502: <html>",
    ),
    "HTTP 500 with a 20 MB body": (
        lambda: _plain("500 Internal Server Error", "text/plain", b"E" * (20 << 20)),
        "http", "HTTP 500: EEEE",
    ),
    "an error event": (
        lambda: [SSE_HEAD, _chunk(_token(0)), _chunk(_event({"error": {"message": "oom"}})),
                 _chunk(b"data: [DONE]\n\n"), END],
        "stream", "oom",
    ),
    "not HTTP at all": (lambda: [b"SSH-2.0-OpenSSH_9.2\r\n\r\n"], "client", "SSH"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_each_bad_answer_is_a_counted_error(make_fake, name: str) -> None:
    answer, kind, fragment = BAD[name]

    def respond(n: int, body: dict) -> list[bytes | float]:
        return answer() if n % 3 == 0 else _good(body)

    server = make_fake(Behaviour(raw_response=respond))
    started = time.monotonic()
    result = run_sync(
        small_config(server.url, point={"concurrency": 1, "prefixes": 3}, requestTimeout="1s")
    )
    assert time.monotonic() - started < 30
    records = result.records()
    assert len(records) == WARMUPS + MEASURED == len(server.bodies)  # nothing dropped
    s = result.summary
    assert s.requests == MEASURED
    assert s.errors_by_kind == {kind: BAD_MEASURED} and s.errors == BAD_MEASURED
    assert s.succeeded == MEASURED - BAD_MEASURED
    measured = [r for r in records if r.phase == "measured"]
    bad = [r for r in measured if (r.index + WARMUPS) % 3 == 0]
    assert all(r.error_kind == kind and fragment in (r.error or "") for r in bad), bad[0].error
    assert all(r.e2e is None and len(r.error or "") <= 2000 for r in bad)
    assert all(r.ok and r.output_tokens == 8 for r in measured if r not in bad)
    assert any(f"{BAD_MEASURED} of {MEASURED} measured requests failed" in w
               for w in result.warnings)  # fmt: skip
