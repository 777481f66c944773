"""Local `kv_aware` router arms: workers publish KV events, vllm-router subscribes to them."""

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from kvbench.api import parse_experiment
from kvbench.runner.cluster import WorkerInfo
from kvbench.runner.cluster.local.arms import KvEventSources, kv_event_sources, router_command
from kvbench.runner.cluster.local.workers import sim_command

ROOT = Path(__file__).resolve().parents[3]


def _spec(policy: str):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["routing"] = [
        {"name": "service", "service": {}},
        {"name": "router", "router": {"policy": policy}},
    ]
    return parse_experiment(document).spec


def _worker(i: int, port: int = 8000) -> WorkerInfo:
    url = f"http://127.0.0.{i + 1}:{port}"
    return WorkerInfo(name=f"gpu-{i}", pool="gpu", base_url=url, metrics_url=f"{url}/metrics")


def _events_config(command: list[str]) -> dict | None:
    if "--kv-events-config" not in command:
        return None
    return json.loads(command[command.index("--kv-events-config") + 1])


def test_workers_publish_kv_events_on_their_own_address_only_for_kv_aware():
    spec = _spec("kv_aware")
    engine = spec.engines()[next(iter(spec.engines()))]
    command = sim_command(spec, engine, spec.workers[0], "gpu-0", "127.0.0.7", 8001, 1)
    assert _events_config(command) == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://127.0.0.7:*",
    }
    plain = _spec("cache_aware")
    assert _events_config(sim_command(plain, engine, plain.workers[0], "w", "h", 1, 1)) is None


def test_router_command_maps_each_worker_to_its_event_source():
    workers = [_worker(0), _worker(1)]
    sources = KvEventSources(
        {w.base_url: f"tcp://127.0.0.{i + 1}:5{i}" for i, w in enumerate(workers)}, 16, "qwen"
    )
    arm = _spec("kv_aware").routing[1].router
    command = router_command(arm, workers, "127.0.0.9", 30000, 30001, sources)
    pairs = [command[i + 1] for i, a in enumerate(command) if a == "--kv-event-source"]
    assert pairs == [
        "http://127.0.0.1:8000=tcp://127.0.0.1:50",
        "http://127.0.0.2:8000=tcp://127.0.0.2:51",
    ]
    assert command[command.index("--kv-event-block-size") + 1] == "16"
    assert command[command.index("--kv-event-model") + 1] == "qwen"
    assert command[command.index("--policy") + 1] == "kv_aware"
    with pytest.raises(RuntimeError, match="KV event sources"):
        router_command(arm, workers, "127.0.0.9", 30000, 30001)


async def _fake_workers(versions: list[dict]) -> tuple[list[web.AppRunner], list[WorkerInfo]]:
    """Workers answering only `/version` and `/v1/models`, on ephemeral loopback ports."""
    runners, workers = [], []
    for i, version in enumerate(versions):

        async def version_handler(_request, body=version):
            return web.json_response(body)

        async def models_handler(_request):
            return web.json_response({"data": [{"id": "served"}]})

        app = web.Application()
        app.router.add_get("/version", version_handler)
        app.router.add_get("/v1/models", models_handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        port = runner.addresses[0][1]
        workers.append(_worker(0, port).model_copy(update={"name": f"w{i}"}))
    return runners, workers


def _version(endpoint: str | None, block_size: int = 16) -> dict:
    return {"kvbench_sim": {"kv_events_endpoint": endpoint, "block_size": block_size}}


def test_event_sources_come_from_the_workers_and_missing_ones_are_refused():
    async def scenario(versions):
        runners, workers = await _fake_workers(versions)
        try:
            return await kv_event_sources(workers), workers
        finally:
            for runner in runners:
                await runner.cleanup()

    sources, workers = asyncio.run(
        scenario([_version("tcp://127.0.0.1:1"), _version("tcp://127.0.0.1:2")])
    )
    assert sources.endpoints == {
        workers[0].base_url: "tcp://127.0.0.1:1",
        workers[1].base_url: "tcp://127.0.0.1:2",
    }
    assert (sources.block_size, sources.model) == (16, "served")
    with pytest.raises(RuntimeError, match="w1 publishes no KV events"):
        asyncio.run(scenario([_version("tcp://127.0.0.1:1"), _version(None)]))
    with pytest.raises(RuntimeError, match="one block size"):
        asyncio.run(scenario([_version("tcp://127.0.0.1:1"), _version("tcp://127.0.0.1:2", 32)]))
