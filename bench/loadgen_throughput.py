"""How fast the load generator drives a server that answers at once, and what it adds to TTFT.

Runs the real `kvbench loadgen` path (`run_load`: workload, scheduler, aiohttp client,
records, summary) pinned to one core against nginx (Debian's package) pinned to another,
returning a fixed vLLM-shaped SSE body. For each connection mode:

- saturation: closed loop at concurrency 64, the most streamed requests per second;
- overhead: open-loop Poisson arrivals at fractions of that rate; against a server that
  answers at once the measured TTFT is the client's (and loopback's) own time, an upper
  bound of what the client adds to a real TTFT.

An httpx loop with the same SSE handling is measured beside it, for the library choice, and
a bare asyncio-streams client at the same rates gives the floor that loopback, nginx and the
machine's scheduling set for any Python client.

    .venv/bin/python bench/loadgen_throughput.py [--requests 20000] [--tokens 16]

Needs nginx (apt-get install nginx-light); prints a table and writes --json if given.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvloop

from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.measure import run_load
from kvbench.loadgen.summary import percentile


def sse_body(tokens: int) -> str:
    """What vLLM streams for a completion of `tokens` tokens with usage."""
    events = []
    for i in range(tokens):
        chunk = {"id": "cmpl-b", "object": "text_completion", "created": 1, "model": "m",
                 "choices": [{"index": 0, "text": " tok", "logprobs": None,
                              "finish_reason": "length" if i == tokens - 1 else None,
                              "stop_reason": None}], "usage": None}  # fmt: skip
        events.append("data: " + json.dumps(chunk, separators=(",", ":")) + "\n\n")
    usage = {"prompt_tokens": 16, "total_tokens": 16 + tokens, "completion_tokens": tokens,
             "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip
    final = {"id": "cmpl-b", "object": "text_completion", "created": 1, "model": "m",
             "choices": [], "usage": usage}  # fmt: skip
    events.append("data: " + json.dumps(final, separators=(",", ":")) + "\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events)


class Nginx:
    """nginx with one worker on the last core, answering every POST with the SSE body."""

    def __init__(self, tokens: int) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise SystemExit("nginx is not installed: apt-get install nginx-light")
        self.dir = Path(tempfile.mkdtemp(prefix="kvbench-nginx-"))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        body = sse_body(tokens).replace("'", "\\'")
        (self.dir / "nginx.conf").write_text(
            f"worker_processes 1;\nerror_log {self.dir}/error.log;\npid {self.dir}/nginx.pid;\n"
            "daemon off;\nevents { worker_connections 16384; }\n"
            f"http {{ access_log off; client_body_temp_path {self.dir}/body;\n"
            "  keepalive_requests 1000000;\n"
            f"  server {{ listen 127.0.0.1:{self.port} backlog=4096;\n"
            f"    location / {{ default_type text/event-stream; return 200 '{body}'; }} }} }}\n"
        )
        core = str(os.cpu_count() - 1 if os.cpu_count() else 0)
        self.proc = subprocess.Popen(
            ["taskset", "-c", core, binary, "-c", str(self.dir / "nginx.conf"), "-p", str(self.dir)]
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.post(self.url + "/v1/completions", content=b"{}", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("nginx did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def config(url: str, requests: int, connection: str, rate: float | None) -> RunConfig:
    point: dict[str, Any] = {"concurrency": 64}
    if rate is not None:
        point["requestRate"] = rate
    return RunConfig.model_validate(
        {
            "model": "m",
            "target": {"kind": "url", "url": url},
            "workload": {
                "random": {
                    "inputTokens": {"mean": 16},
                    "outputTokens": {"mean": 16},
                    "requests": requests,
                }
            },
            "point": point,
            "seed": 1,
            "connection": connection,
            "tokens": {"low": 0, "high": 1 << 30},
        }
    )


def measure(url: str, requests: int, connection: str, rate: float | None) -> dict[str, Any]:
    result = uvloop.run(run_load(config(url, requests, connection, rate)))
    s, c = result.summary, result.client
    return {
        "connection": connection,
        "offered_rate": rate,
        "requests": s.requests,
        "errors": s.errors,
        "req_per_s": round(s.wall.requests_per_second or 0, 1),
        "ttft_p50_ms": round((s.wall.ttft.p50 or 0) * 1e3, 3),
        "ttft_p99_ms": round((s.wall.ttft.p99 or 0) * 1e3, 3),
        "lag_p99_ms": round((c.loop_lag_p99 or 0) * 1e3, 3),
        "lateness_p99_ms": round((c.lateness_p99 or 0) * 1e3, 3),
        "cpu": c.cpu_utilization,
        "client_bound": c.client_bound,
    }


async def _httpx_loop(url: str, requests: int, keep_alive: bool) -> dict[str, Any]:
    """httpx with the same SSE handling, for comparison only (not the product's path)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64 if keep_alive else 0)
    body = json.dumps({"model": "m", "prompt": [1] * 16, "max_tokens": 16, "stream": True})
    pending, ttfts = iter(range(requests)), []
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def worker() -> None:
            for _ in pending:
                start, first = time.perf_counter(), None
                async with client.stream("POST", url + "/v1/completions", content=body) as resp:
                    async for chunk in resp.aiter_bytes():
                        if first is None and b'"usage":null' in chunk:
                            first = time.perf_counter()
                ttfts.append((first or time.perf_counter()) - start)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(64)))
        elapsed = time.perf_counter() - began
    ttfts.sort()
    return {
        "connection": "keep-alive" if keep_alive else "new",
        "req_per_s": round(requests / elapsed, 1),
        "ttft_p50_ms": round(percentile(ttfts, 50) * 1e3, 3),
        "ttft_p99_ms": round(percentile(ttfts, 99) * 1e3, 3),
    }


async def _raw_open_loop(port: int, rate: float, requests: int) -> dict[str, Any]:
    """The floor: a bare asyncio-streams client (no HTTP library) at the same Poisson rate,
    new connection each; what it measures is loopback, nginx and scheduling, not a library."""
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: 2\r\n\r\n{}"
    )
    ttfts: list[float] = []

    async def one() -> None:
        start, first = time.perf_counter(), None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        while chunk := await reader.read(65536):
            if first is None and b'"usage":null' in chunk:
                first = time.perf_counter()
        writer.close()
        ttfts.append((first or time.perf_counter()) - start)

    rng, due, tasks = random.Random(1), time.perf_counter(), []
    for _ in range(requests):
        due += rng.expovariate(rate)
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    ttfts.sort()
    return {
        "connection": "new",
        "offered_rate": rate,
        "ttft_p50_ms": round(percentile(ttfts, 50) * 1e3, 3),
        "ttft_p99_ms": round(percentile(ttfts, 99) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--tokens", type=int, default=16, help="SSE token chunks per response")
    parser.add_argument("--fractions", default="0.025,0.25,0.5,0.75")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    server = Nginx(args.tokens)
    rows: list[dict[str, Any]] = []
    try:
        for connection in ("new", "keep-alive"):
            top = measure(server.url, args.requests, connection, None)
            rows.append({"client": "kvbench (aiohttp+uvloop)", "mode": "saturation", **top})
            for fraction in (float(f) for f in args.fractions.split(",")):
                rate = round(top["req_per_s"] * fraction)
                n = max(2000, min(args.requests, rate * 5))
                row = measure(server.url, n, connection, rate)
                rows.append(
                    {"client": "kvbench (aiohttp+uvloop)", "mode": f"{fraction:.0%}", **row}
                )
                if connection == "new":
                    floor = uvloop.run(_raw_open_loop(server.port, rate, n))
                    rows.append(
                        {"client": "raw sockets (floor)", "mode": f"{fraction:.0%}", **floor}
                    )
        for keep_alive in (False, True):
            n = min(args.requests, 5000)
            row = uvloop.run(_httpx_loop(server.url, n, keep_alive))
            rows.append({"client": "httpx (comparison)", "mode": "saturation", **row})
    finally:
        server.stop()
    keys = ["client", "mode", "connection", "offered_rate", "req_per_s", "ttft_p50_ms",
            "ttft_p99_ms", "lag_p99_ms", "lateness_p99_ms", "cpu", "client_bound",
            "errors"]  # fmt: skip
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row.get(k, "")) for k in keys))
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
