"""How much load one simulator process sustains, and what an engine step costs.

1. Engine step cost: wall microseconds per ``EngineCore.step()`` for decode batches of
   growing size (no HTTP).
2. HTTP: one ``python -m kvbench.sim --time-scale 0`` process on 127.0.0.1, driven by an
   aiohttp client with keep-alive connections, short prompts (32 token ids, 16 output
   tokens), non-streaming and streaming. Reports completed requests per wall second.
   The client runs in this process, so on two cores both sides share the machine.

    .venv/bin/python bench/sim_throughput.py [--seconds 8] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time

import aiohttp

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.request import SimRequest


def step_cost(batch: int, steps: int = 300) -> float:
    """Mean wall microseconds per decode step with ``batch`` running requests."""
    sim = build_engine(
        SimConfig(model="Qwen/Qwen3-0.6B", max_model_len=4096, max_num_seqs=1024,
                  kv_cache_memory_bytes=8 << 30, time_scale=0)
    )  # fmt: skip
    core = sim.core
    for i in range(batch):
        request = SimRequest(f"r{i}", list(range(i * 40, i * 40 + 32)), 100_000, arrival_time=0.0)
        core.add_request(request)
    while len(core.scheduler.running) < batch:
        core.step()
    start = time.perf_counter()
    for _ in range(steps):
        core.step()
    return (time.perf_counter() - start) / steps * 1e6


async def _client(url: str, seconds: float, concurrency: int, stream: bool) -> tuple[int, float]:
    done = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(k: int) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < deadline:
                body = {"prompt": [(k * 7919 + i * 31 + j) % 100_000 + 1000 for j in range(32)],
                        "max_tokens": 16, "stream": stream}  # fmt: skip
                async with session.post(url + "/v1/completions", json=body) as response:
                    await response.read()
                    assert response.status == 200
                done += 1
                i += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return done, time.perf_counter() - start


def http_rate(seconds: float, concurrency: int, stream: bool) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench.sim", "serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1",
         "--port", "0", "--time-scale", "0", "--max-model-len", "4096",
         "--kv-cache-memory-bytes", "4G"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        port = None
        while port is None:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError("simulator did not start")
            match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            port = int(match.group(1)) if match else None
        url = f"http://127.0.0.1:{port}"
        asyncio.run(_client(url, 1.0, concurrency, stream))  # warm-up
        done, elapsed = asyncio.run(_client(url, seconds, concurrency, stream))
        return done / elapsed
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    print("engine step cost (decode-only batches, no HTTP):")
    for batch in (1, 8, 32, 64, 128, 256, 512):
        us = step_cost(batch)
        print(f"  batch {batch:>4}: {us:8.1f} us/step  ({us / batch:6.2f} us per request)")
    print(f"HTTP, time scale 0, 32-token prompts, 16 output tokens, "
          f"{args.concurrency} keep-alive connections, {args.seconds:.0f} s:")  # fmt: skip
    for stream in (False, True):
        rate = http_rate(args.seconds, args.concurrency, stream)
        print(f"  {'streaming' if stream else 'non-streaming':<13}: {rate:8.0f} requests/s "
              f"({rate * 16:8.0f} output tokens/s)")  # fmt: skip


if __name__ == "__main__":
    main()
