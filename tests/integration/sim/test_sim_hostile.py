"""The simulator's HTTP surface under hostile clients: garbage and truncated bodies, huge
bodies, slow clients, disconnects. None of them crashes the server, leaks a KV block or a
running slot, or costs a traceback in the log; each gets an answer in vLLM's error shape.

The simulator runs at time scale 1 (about 6 ms a token) so that requests last long enough
to be cut off; the limits are short so that timeouts happen within a test.
"""

import itertools
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from sim_http_harness import Sim, running_sim

from kvbench.sim.api_models import ErrorResponse
from kvbench.sim.args import parse_sim_args

JSON = {"Content-Type": "application/json"}
LIMITS = {"time_scale": 1.0, "http_timeout_keep_alive": 1.0, "request_body_timeout": 1.0}
LONG = 3000  # output tokens: about 18 s at time scale 1, far longer than any test waits


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with running_sim(**LIMITS) as s:
        yield s


def _port(sim: Sim) -> int:
    return int(sim.url.rsplit(":", 1)[1])


def _connect(sim: Sim) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", _port(sim)), timeout=10)
    sock.settimeout(10)
    return sock


def _head(path: str, length: int) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: sim", "Content-Type: application/json"]
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of one response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(
        line.split(b":", 1)[1] for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ))  # fmt: skip
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ", 2)[1]), body[:length]


def _error(body: bytes) -> dict:
    return ErrorResponse.model_validate_json(body).error.model_dump()


def _engine_idle(sim: Sim, timeout: float = 5.0) -> None:
    """Wait until no request runs or waits and every KV block is free, in the engine and
    in /metrics."""
    core = sim.server.sim.core
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not core.scheduler.running and not core.scheduler.waiting and core.kv.usage == 0:
            break
        time.sleep(0.02)
    pool = core.kv.pool
    assert (len(core.scheduler.running), len(core.scheduler.waiting)) == (0, 0)
    assert core.kv.usage == 0 and pool.num_free_blocks == pool.num_gpu_blocks - 1
    assert sim.metric("vllm:num_requests_running") == 0
    assert sim.metric("vllm:num_requests_waiting") == 0
    assert sim.metric("vllm:kv_cache_usage_perc") == 0


def _wait_running(sim: Sim, timeout: float = 5.0) -> None:
    core = sim.server.sim.core
    deadline = time.monotonic() + timeout
    while not core.scheduler.running:
        assert time.monotonic() < deadline, "the request never ran"
        time.sleep(0.01)


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="kvbench.sim")
    return caplog


def _no_tracebacks(log: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in log.records if r.exc_info] == []


@pytest.mark.parametrize(
    ("body", "status", "err_type", "fragment"),
    [
        (b'{"prompt": "hel', 400, "Bad Request", "'json_invalid'"),
        (b"garbage\x00\x01\x02", 400, "Bad Request", "'json_invalid'"),
        (b"\x00\x01\x02garbage\xff", 400, "Bad Request", "There was an error parsing the body"),
        (b'{"prompt": "\xff\xfe"}', 400, "Bad Request", "There was an error parsing the body"),
        (b"[" * 100_000, 400, "Bad Request", "There was an error parsing the body"),
        (b"[1, 2]", 400, "Bad Request", "'model_type'"),
        (b'"just a string"', 400, "Bad Request", "'model_type'"),
        (b'{"prompt": {"nested": true}}', 400, "Bad Request", "body.prompt"),
        (b'{"prompt": "x", "max_tokens": 1e400}', 400, "Bad Request", "body.max_tokens"),
        (b'{"prompt": [1, 2, "three"]}', 400, "Bad Request", "body.prompt"),
    ],
)
def test_garbage_bodies_get_vllm_errors(sim, server_log, body, status, err_type, fragment):
    r = sim.client.post(
        sim.url + "/v1/completions", content=body, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == status, r.text
    err = ErrorResponse.model_validate(r.json()).error
    assert err.type == err_type and err.code == status and fragment in err.message
    assert sim.get("/health").status_code == 200
    _no_tracebacks(server_log)


def test_a_body_cut_off_mid_way_leaks_nothing(sim, server_log):
    for _ in range(20):
        sock = _connect(sim)
        sock.sendall(_head("/v1/completions", 1000) + b'{"prompt": "unfinished')
        sock.close()
    assert sim.get("/health").status_code == 200
    _engine_idle(sim)
    _no_tracebacks(server_log)


def _error_lines(log: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in log.records if "Error handling" in r.getMessage()]


def test_malformed_http_logs_one_line(sim, server_log):
    for raw in (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00"):
        sock = _connect(sim)
        sock.sendall(raw)
        assert sock.recv(100).startswith(b"HTTP/1.0 400")
        sock.close()
    deadline = time.monotonic() + 5
    while len(_error_lines(server_log)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the server logs after it has answered
    lines = _error_lines(server_log)
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    _no_tracebacks(server_log)


def test_a_declared_huge_body_is_refused_before_it_is_sent(sim):
    sock = _connect(sim)
    sock.sendall(_head("/v1/completions", 50_000_000))
    status, body = _read_response(sock)  # no byte of the body was sent
    sock.close()
    err = _error(body)
    assert status == 413 and err["code"] == 413 and err["type"] == "Request Entity Too Large"
    assert "50000000 bytes" in err["message"] and "--max-request-body-bytes" in err["message"]


@pytest.mark.parametrize(("size", "status"), [(1 << 20, 400), ((1 << 20) + 1, 413)])
def test_the_default_limit_is_64_bytes_a_token_of_context_at_least_1_mib(sim, size, status):
    head = b'{"prompt": "'
    payload = head + b"w" * (size - len(head) - 2) + b'"}'
    assert len(payload) == size
    r = sim.client.post(sim.url + "/v1/completions", content=payload, headers=JSON)
    assert r.status_code == status  # 400: read, and refused as too long a prompt
    assert sim.server.body_limit == 1 << 20 == max(1 << 20, 64 * 4096)


def test_limit_flags(monkeypatch):
    monkeypatch.setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "7")
    config, ignored = parse_sim_args(["--max-request-body-bytes", "2M"])
    assert (config.max_request_body_bytes, config.http_timeout_keep_alive) == (2 << 20, 7.0)
    assert config.request_body_timeout == 60.0 and ignored == []
    config, _ = parse_sim_args(["--http-timeout-keep-alive", "1.5", "--request-body-timeout", "3"])
    assert (config.http_timeout_keep_alive, config.request_body_timeout) == (1.5, 3.0)
    assert config.body_limit(131072) == 8 << 20


def test_a_streamed_huge_body_is_refused_at_the_limit(sim):
    chunk = b"x" * (1 << 20)
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(50):
            sent += len(chunk)
            yield chunk

    r = sim.client.post(
        sim.url + "/v1/completions", content=body(), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"]["type"] == "Request Entity Too Large"
    assert sent == 50 << 20 and sim.get("/health").status_code == 200


class _Stream(threading.Thread):
    """A streamed request in the background, timing each chunk it receives."""

    def __init__(self, url: str, tokens: int) -> None:
        super().__init__()
        self.url, self.tokens = url, tokens
        self.chunk_times: list[float] = []
        self.finished = 0.0

    def run(self) -> None:
        body = {"prompt": "meanwhile", "max_tokens": self.tokens, "stream": True}
        with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    self.chunk_times.append(time.monotonic())
        self.finished = time.monotonic()

    def started_streaming(self) -> "_Stream":
        self.start()
        while not self.chunk_times:
            time.sleep(0.005)
        return self

    def longest_wait(self) -> float:
        self.join(60)
        assert len(self.chunk_times) == self.tokens
        return max(b - a for a, b in itertools.pairwise(self.chunk_times))


def _post_json_bytes(url: str, payload: bytes, *, chunked: bool) -> httpx.Response:
    content = (payload[i : i + (1 << 20)] for i in range(0, len(payload), 1 << 20))
    return httpx.post(
        url + "/v1/completions", content=content if chunked else payload, timeout=120,
        headers={"Content-Type": "application/json"},
    )  # fmt: skip


def _text_body(words: int) -> bytes:
    return json.dumps({"prompt": "word " * words, "max_tokens": 4}).encode()


def test_a_huge_body_does_not_stall_other_clients(sim):
    """50 MB of valid JSON, sent without a Content-Length while another client streams:
    refused at the limit, and the stream goes on. Decoding and tokenizing it on the event
    loop took seconds, during which no other client got a byte."""
    stream = _Stream(sim.url, 150).started_streaming()
    r = _post_json_bytes(sim.url, _text_body(10_000_000), chunked=True)  # 50 MB
    assert r.status_code == 413 and r.json()["error"]["type"] == "Request Entity Too Large"
    assert stream.longest_wait() < 1.0


def test_a_big_allowed_body_is_tokenized_off_the_loop(monkeypatch):
    """Under a raised limit a 20 MB prompt is decoded and tokenized (then refused as too
    long) while a stream runs. The tokenizer is held until the stream has received ten
    more chunks: in a thread it is, and the request completes; on the event loop no chunk
    could go out while it is held, and the hold would run out."""
    with running_sim(time_scale=1.0, max_request_body_bytes=64 << 20) as big:
        stream = _Stream(big.url, 400).started_streaming()
        encode = big.server.tokenizer.encode
        held: dict[str, int] = {}

        def held_encode(text: str, add_special_tokens: bool = True) -> list[int]:
            if len(text) > 1 << 20:
                first = len(stream.chunk_times)
                deadline = time.monotonic() + 10
                while len(stream.chunk_times) < first + 10 and time.monotonic() < deadline:
                    time.sleep(0.005)
                held["chunks"] = len(stream.chunk_times) - first
            return encode(text, add_special_tokens)

        monkeypatch.setattr(big.server.tokenizer, "encode", held_encode)
        r = _post_json_bytes(big.url, _text_body(4_000_000), chunked=False)
        assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
        assert held.get("chunks", 0) >= 10, f"chunks sent while tokenizing: {held}"
        stream.longest_wait()


def test_slow_header_clients_are_disconnected(sim):
    """200 connections trickle a request's header, one byte every 0.25 s, and 20 send
    nothing at all: the keep-alive timer (1 s here, vLLM's 5 s by default) closes them."""
    trickling = [_connect(sim) for _ in range(200)]
    silent = [_connect(sim) for _ in range(20)]
    for sock in trickling:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nX-Slow: ")
    opened = time.monotonic()
    open_socks = set(trickling)
    while open_socks and time.monotonic() - opened < 8:
        for sock in list(open_socks):
            try:
                sock.sendall(b"a")
            except OSError:
                open_socks.discard(sock)
        time.sleep(0.25)
    elapsed = time.monotonic() - opened
    assert not open_socks, f"{len(open_socks)} slow clients still held after {elapsed:.1f} s"
    assert elapsed >= 0.9
    for sock in silent:
        sock.settimeout(5)
        assert sock.recv(1) == b""
    for sock in trickling + silent:
        sock.close()
    assert sim.get("/health").status_code == 200


def test_a_body_that_never_arrives_gets_408(sim):
    sock = _connect(sim)
    sock.sendall(_head("/v1/completions", 100) + b'{"prompt":')
    started = time.monotonic()
    status, body = _read_response(sock)
    assert status == 408 and _error(body)["type"] == "Request Timeout"
    assert 0.9 <= time.monotonic() - started < 5
    sock.settimeout(5)
    assert sock.recv(1) == b""  # and the connection is closed
    sock.close()


def _abort_lines(log: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in log.records if "aborted" in r.getMessage()]


def test_a_stream_cut_off_frees_its_blocks_and_slot(sim, server_log):
    success = sim.metric("vllm:request_success_total")
    sock = _connect(sim)
    body = json.dumps({"prompt": "cut me off " * 50, "max_tokens": LONG, "stream": True})
    sock.sendall(_head("/v1/completions", len(body)) + body.encode())
    data = b""
    while data.count(b"data: {") < 3:
        data += sock.recv(65536)
    assert sim.server.sim.core.kv.usage > 0
    sock.close()
    _engine_idle(sim)
    assert sim.metric("vllm:request_success_total") == success  # vLLM does not count it
    assert len(_abort_lines(server_log)) == 1
    _no_tracebacks(server_log)


def test_a_non_streamed_request_whose_client_left_is_aborted(sim, server_log):
    success = sim.metric("vllm:request_success_total")
    generated = sim.metric("vllm:generation_tokens_total")
    sock = _connect(sim)
    body = json.dumps({"prompt": "nobody waits for me " * 50, "max_tokens": LONG})
    sock.sendall(_head("/v1/completions", len(body)) + body.encode())
    _wait_running(sim)
    time.sleep(0.2)
    sock.close()
    left = time.monotonic()
    _engine_idle(sim, timeout=3)  # it would run for ~18 s more
    assert time.monotonic() - left < 3
    assert sim.metric("vllm:request_success_total") == success
    assert 0 < sim.metric("vllm:generation_tokens_total") - generated < LONG
    assert len(_abort_lines(server_log)) == 1
    _no_tracebacks(server_log)


def test_many_clients_leaving_at_random_points_leak_nothing(sim, server_log):
    socks = []
    for i in range(40):
        body = json.dumps({"prompt": f"burst {i} " * 20, "max_tokens": LONG, "stream": i % 2 == 0})
        sock = _connect(sim)
        sock.sendall(_head("/v1/completions", len(body)) + body.encode())
        socks.append(sock)
    _wait_running(sim)
    for i, sock in enumerate(socks):
        time.sleep(0.01 * (i % 5))
        sock.close()
    _engine_idle(sim, timeout=10)
    assert len(_abort_lines(server_log)) == 40
    _no_tracebacks(server_log)
    r = sim.post("/v1/completions", {"prompt": "still serving", "max_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
