"""Wire TTFT against the simulator's own, on one run of ``kvbench sim --time-scale 1``.

A minimal HTTP/1.1 client on blocking sockets (one thread per concurrent stream, keep-alive)
takes two kernel timestamps per request: when the request's last byte went out on loopback
(which delivers it at once), and when the first body bytes holding a ``data:`` event arrived
(a completion's first event is its first token). Their difference is the TTFT a client sees
on the wire; the simulator's is ``first_token_time - arrival_time`` from the
final chunk's ``kvbench`` timings. Meanwhile another thread scrapes ``/metrics`` as
Prometheus would, so that renders compete with the streams as they do in a benchmark.

Used by tests/integration/sim/test_sim_wire_ttft.py and bench/sim_wire_ttft.py.
"""

from __future__ import annotations

import itertools
import json
import random
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvbench.procs import free_port
from kvbench.testing.wait import wait_for

MODEL = "Qwen/Qwen3-0.6B"
GOAL_MS = {"p50": 1.0, "p99": 3.0}
"""Wire minus reported TTFT the simulator is built to stay within (issue 14, item 7)."""
TTFT_METRIC = "vllm:time_to_first_token_seconds"
_TOKEN_EVENT = b"data: {"
"""Every event of a completion but the final ``data: [DONE]`` carries one token."""
_WORDS = [a + b + c for a in "bdfgklmnprst" for b in "aeiou" for c in "bdgklmnprstz"]
"""Three-letter words: the stand-in tokenizer makes one token of each, with its space."""


@dataclass(frozen=True)
class Sample:
    """One streamed request: the TTFT on the wire and the one the simulator reported, and
    the gaps between its tokens on both."""

    wire: float
    reported: float
    wire_itl: list[float]
    reported_itl: list[float]

    @property
    def late(self) -> float:
        return self.wire - self.reported


@dataclass(frozen=True)
class Run:
    samples: list[Sample]
    histogram_sum: float
    histogram_count: int
    scrapes: int


def text_prompt(rng: random.Random, tokens: int) -> str:
    """A text prompt of ``tokens`` stand-in tokens, distinct per call."""
    return " ".join(rng.choice(_WORDS) for _ in range(tokens))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1), nearest rank: with few samples p99 is the largest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


@contextmanager
def sim_process(log: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """``kvbench sim --time-scale 1`` on 127.0.0.1; yields (host, port) once it is healthy."""
    port = free_port("127.0.0.1")
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "kvbench", "sim", "--host", "127.0.0.1", "--port", str(port),
             "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824",
             "--profile", "qwen3-0.6b-24gb", "--time-scale", "1", *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/health"
            wait_for(lambda: httpx.get(url).status_code == 200, 60, "the simulator")
            yield "127.0.0.1", port
        finally:
            server.terminate()
            server.wait(10)


_SO_TIMESTAMPING = 37
_TIMESTAMPS = (1 << 1) | (1 << 3) | (1 << 4) | (1 << 11)
"""SOF_TIMESTAMPING_TX_SOFTWARE | RX_SOFTWARE | SOFTWARE | OPT_TSONLY (linux/net_tstamp.h)."""


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The software timestamp of a ``recvmsg`` (``struct scm_timestamping``, CLOCK_REALTIME)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING:
            seconds, nanoseconds = struct.unpack_from("qq", data)
            return seconds + nanoseconds * 1e-9
    return None


class _Connection:
    """One keep-alive connection that posts a streamed completion and times it with the
    kernel's socket timestamps: when the request's last byte was handed to loopback, and
    when the bytes of the first event reached this socket. A client thread that the machine
    (or this process's GIL) runs late does not move either instant, so what is measured is
    the server's own latency between the two."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, _TIMESTAMPS)

    def close(self) -> None:
        self.sock.close()

    def _sent_at(self) -> float:
        """The transmit timestamp of the last ``sendall``, from the socket's error queue."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                _, ancillary, _, _ = self.sock.recvmsg(
                    0, 1024, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT
                )
            except BlockingIOError:
                time.sleep(0.0001)
                continue
            stamp = _kernel_time(ancillary)
            if stamp is not None:
                return stamp
        raise AssertionError("no transmit timestamp: SO_TIMESTAMPING unsupported?")

    def stream(self, prompt: str, max_tokens: int) -> Sample:
        body = json.dumps(
            {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        ).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + body)
        sent = self._sent_at()
        raw, arrivals = b"", []
        while not raw.endswith(b"\r\n0\r\n\r\n"):
            chunk, ancillary, _, _ = self.sock.recvmsg(1 << 16, 1024)
            if not chunk:
                raise ConnectionError("the simulator closed the connection")
            raw += chunk
            tokens = raw.count(_TOKEN_EVENT)
            if tokens > len(arrivals):
                stamp = _kernel_time(ancillary)
                assert stamp is not None, "no receive timestamp"
                arrivals += [stamp] * (tokens - len(arrivals))
        status, _, rest = raw.partition(b"\r\n")
        assert b" 200 " in status + b" ", f"status {status!r}"
        events = [e for e in _dechunk(rest.partition(b"\r\n\r\n")[2]).split(b"\n\n") if e]
        timings = json.loads(events[-2].removeprefix(b"data: "))["kvbench"]
        due = timings["token_times"]
        assert len(arrivals) == len(due) == max_tokens, "one event per token"
        return Sample(
            wire=arrivals[0] - sent,
            reported=timings["first_token_time"] - timings["arrival_time"],
            wire_itl=[b - a for a, b in itertools.pairwise(arrivals)],
            reported_itl=[b - a for a, b in itertools.pairwise(due)],
        )


def _dechunk(body: bytes) -> bytes:
    """The payload of a chunked transfer-encoded body."""
    out, at = [], 0
    while True:
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[line_end + 2 : line_end + 2 + size])
        at = line_end + 2 + size + 2


def _histogram(text: str) -> tuple[float, int]:
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith(TTFT_METRIC + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(TTFT_METRIC + "_count"):
            count += int(float(line.rsplit(" ", 1)[1]))
    return total, count


def measure(
    host: str,
    port: int,
    *,
    requests: int,
    concurrency: int = 4,
    prompt_tokens: int = 1800,
    max_tokens: int = 8,
    scrape_interval: float = 1 / 3,
    seed: int = 0,
) -> Run:
    """Drive ``requests`` streamed text completions, ``concurrency`` at a time, while
    ``/metrics`` is scraped every ``scrape_interval`` seconds; the histogram is read after."""
    rng = random.Random(seed)
    prompts = [text_prompt(rng, prompt_tokens) for _ in range(requests)]
    samples: list[Sample] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    scrapes = [0]
    base = f"http://{host}:{port}"

    def scrape() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.wait(scrape_interval):
                assert client.get(base + "/metrics").status_code == 200
                scrapes[0] += 1

    def drive() -> None:
        connection = _Connection(host, port)
        try:
            while True:
                with lock:
                    if not prompts or errors:
                        return
                    prompt = prompts.pop()
                sample = connection.stream(prompt, max_tokens)
                with lock:
                    samples.append(sample)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    drivers = [threading.Thread(target=drive, daemon=True) for _ in range(concurrency)]
    for thread in drivers:
        thread.start()
    for thread in drivers:
        thread.join()
    stop.set()
    scraper.join()
    if errors:
        raise errors[0]
    total, count = _histogram(httpx.get(base + "/metrics").text)
    return Run(samples, total, count, scrapes[0])


def client_itl(run: Run) -> tuple[float, float]:
    """ITL as clients compute it, (last token - first token) / (tokens - 1) per request, then
    averaged over requests, on the wire and as the simulator reported it, in ms."""
    wire = statistics.mean(statistics.mean(s.wire_itl) for s in run.samples)
    reported = statistics.mean(statistics.mean(s.reported_itl) for s in run.samples)
    return wire * 1e3, reported * 1e3


def summary(run: Run) -> dict[str, float]:
    """Wire minus reported TTFT, in milliseconds."""
    late = [s.late * 1e3 for s in run.samples]
    return {
        "p50": statistics.median(late),
        "p90": percentile(late, 0.9),
        "p99": percentile(late, 0.99),
        "max": max(late),
        "min": min(late),
    }
