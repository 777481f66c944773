"""On the wire, at time scale 1, as a third-party client measures: no streamed token leaves the
simulator before its simulated time (the engine computes a step ahead of the wall clock; what
it computed early must wait), so no token rides with the one before it and ITL is not read low.
How late a token is depends on the machine's load, so only earliness is asserted."""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from kvbench.procs import free_port
from kvbench.testing.wait import wait_for

EARLY_TOLERANCE = 0.001
"""Seconds a token may arrive before its simulated time: the event loop's timer slack."""


def _stream(url: str, body: dict) -> tuple[float, list[tuple[float, dict]]]:
    """(when the request was sent, [(arrival, event)] for every data event), perf_counter."""
    events = []
    with httpx.Client(timeout=60) as client:
        sent = time.perf_counter()
        with client.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            buffer = b""
            for chunk in response.iter_raw():
                now = time.perf_counter()
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    data = event.removeprefix(b"data: ")
                    if data != b"[DONE]":
                        events.append((now, json.loads(data)))
    return sent, events


def test_no_streamed_token_leaves_before_its_simulated_time(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    log = (tmp_path / "sim.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "sim", "--host", "127.0.0.1", "--port", str(port),
         "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824",
         "--profile", "qwen3-0.6b-24gb", "--time-scale", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{base}/health").status_code == 200, 60, "the simulator")
        body = {"model": "Qwen/Qwen3-0.6B", "prompt": list(range(1000, 1600)),
                "max_tokens": 24, "stream": True}  # fmt: skip
        for _ in range(3):
            sent, events = _stream(f"{base}/v1/completions", body)
            timings = events[-1][1]["kvbench"]
            due = [t - timings["arrival_time"] for t in timings["token_times"]]
            arrivals = [at - sent for at, e in events if e["choices"]]
            assert len(arrivals) == len(due) == 24, "one chunk per token"
            early = [(i, d - a) for i, (a, d) in enumerate(zip(arrivals, due, strict=True))
                     if a < d - EARLY_TOLERANCE]  # fmt: skip
            assert early == [], f"tokens (index, seconds early): {early}"
    finally:
        server.terminate()
        server.wait(10)
        log.close()
