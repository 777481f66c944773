"""Runs a simulator server in a background thread on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.kv_events import ZmqEventPublisher
from kvbench.sim.server import SimServer, start_server

GIB = 1 << 30

BASE_CONFIG = {
    "model": "Qwen/Qwen3-0.6B",
    "max_model_len": 4096,
    "kv_cache_memory_bytes": GIB,
    "gpu_memory_utilization": 0.01,
    "time_scale": 0.0,
    "worker_id": "sim-test",
}


@dataclass
class Sim:
    """A running simulator: its URL, the server object (same process) and a client."""

    url: str
    server: SimServer
    client: httpx.Client
    kv_endpoint: str | None

    def post(self, path: str, body: object, **kw: object) -> httpx.Response:
        return self.client.post(self.url + path, json=body, **kw)

    def get(self, path: str) -> httpx.Response:
        return self.client.get(self.url + path)

    def stream(self, path: str, body: object) -> list[dict | str]:
        """POST and collect the SSE events: parsed JSON dicts, and "[DONE]"."""
        events: list[dict | str] = []
        with self.client.stream("POST", self.url + path, json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if not line:
                    continue
                assert line.startswith("data: ")
                payload = line[len("data: ") :]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events

    def metric(self, name: str) -> float:
        """Sum of a metric's samples in /metrics (labels ignored)."""
        total = 0.0
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


@contextmanager
def running_sim(dev_mode: bool = False, **config: object) -> Iterator[Sim]:
    """Start a server for the duration of the block."""
    cfg = SimConfig(**(BASE_CONFIG | config))
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict = {}

    async def boot() -> None:
        publisher = None
        if cfg.kv_events_config is not None and cfg.kv_events_config.active:
            publisher = ZmqEventPublisher(cfg.kv_events_config, block_size=cfg.block_size)
        sim = build_engine(cfg, on_kv_events=publisher.publish if publisher else None)
        server = SimServer(sim, dev_mode=dev_mode)
        holder["running"] = await start_server(server, "127.0.0.1", 0, publisher)
        holder["endpoint"] = publisher.last_endpoint if publisher else None

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(boot())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10), "simulator did not start"
    running = holder["running"]
    url = f"http://127.0.0.1:{running.port}"
    with httpx.Client(timeout=30) as client:
        for _ in range(100):
            if client.get(url + "/health").status_code == 200:
                break
        try:
            yield Sim(url, running.server, client, holder["endpoint"])
        finally:
            asyncio.run_coroutine_threadsafe(running.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
