"""Local `kv_aware` router arms: the back end tells each worker where to publish KV events (a
port of its own, bound on every address), registers it with the worker, and the router's arm
subscribes there: nothing is asked of the worker, so real vLLM serves kv_aware as the
simulator does."""

import json
import sys
import time
from pathlib import Path

import pytest
import yaml
import zmq

from kvbench.api import parse_experiment
from kvbench.runner.cluster import WorkerInfo
from kvbench.runner.cluster.local import workers as local_workers
from kvbench.runner.cluster.local.arms import KvEventSources, kv_event_sources, router_command
from kvbench.runner.cluster.local.children import KvEventSource, LocalChildren
from kvbench.runner.cluster.local.workers import kv_events_args, worker_kv_events
from kvbench.sim.config import KVEventsConfig
from kvbench.sim.kv_events import ZmqEventPublisher

ROOT = Path(__file__).resolve().parents[3]


def _spec(policy: str, **engine):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["routing"] = [
        {"name": "service", "service": {}},
        {"name": "router", "router": {"policy": policy}},
    ]
    document["spec"]["engine"].update(engine)
    return parse_experiment(document).spec


def _worker(i: int, port: int = 8000, uid: str | None = None) -> WorkerInfo:
    url = f"http://127.0.0.{i + 1}:{port}"
    return WorkerInfo(
        name=f"gpu-{i}", pool="gpu", uid=uid, base_url=url, metrics_url=f"{url}/metrics"
    )


def _events_config(command: list[str]) -> dict:
    return json.loads(command[command.index("--kv-events-config") + 1])


def test_the_worker_binds_every_address_and_the_router_connects_to_its_own() -> None:
    """vLLM's publisher binds an endpoint with `*` and connects to any other: a worker given
    `tcp://HOST:PORT` would connect to nothing and publish nothing."""
    spec = _spec("kv_aware", blockSize=32, servedModelName="served")
    source = worker_kv_events(spec, spec.engine, "127.0.0.7", taken=set())
    assert source is not None
    assert (source.host, source.block_size, source.model) == ("127.0.0.7", 32, "served")
    config = _events_config(kv_events_args(source))
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{source.port}",
    }
    assert source.endpoint == f"tcp://127.0.0.7:{source.port}"
    plain = _spec("cache_aware")
    assert worker_kv_events(plain, plain.engine, "127.0.0.7", taken=set()) is None


def test_the_model_and_block_size_default_as_the_engines_do() -> None:
    spec = _spec("kv_aware")
    source = worker_kv_events(spec, spec.engine, "127.0.0.7", taken=set())
    assert source is not None
    assert (source.model, source.block_size) == (spec.engine.model, 16)


def test_a_worker_never_gets_a_port_another_worker_has(monkeypatch) -> None:
    """Workers started together pick their ports before any binds one."""
    picks = iter([5001, 5002, 5003])
    monkeypatch.setattr(local_workers, "free_port", lambda host: next(picks))
    spec = _spec("kv_aware")
    source = worker_kv_events(spec, spec.engine, "127.0.0.7", taken={5001, 5002})
    assert source is not None and source.port == 5003


def test_a_subscriber_at_the_routers_endpoint_receives_what_the_worker_publishes() -> None:
    """The simulator's publisher applies vLLM's bind-or-connect rule to the endpoint the back
    end gives the worker; the router's endpoint must then reach it."""
    spec = _spec("kv_aware")
    source = worker_kv_events(spec, spec.engine, "127.0.0.7", taken=set())
    assert source is not None
    config = KVEventsConfig.model_validate(_events_config(kv_events_args(source)))
    publisher = ZmqEventPublisher(config, block_size=source.block_size)
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(source.endpoint)
    try:
        deadline = time.monotonic() + 30
        while not subscriber.poll(100):  # a new subscriber misses what was sent before it joined
            assert time.monotonic() < deadline, f"nothing arrived at {source.endpoint}"
            publisher.publish([("cleared",)])
        assert len(subscriber.recv_multipart()) == 3
    finally:
        subscriber.close(linger=0)
        publisher.close()


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


def test_event_sources_come_from_the_registry_of_this_start(tmp_path: Path) -> None:
    """Nothing is asked of the workers (real vLLM's `/version` does not say where it
    publishes): each worker's registered publisher, for the start the runner knows."""
    children = LocalChildren(tmp_path / "children")

    def register(i: int, block_size: int = 16, publishes: bool = True) -> WorkerInfo:
        source = KvEventSource(host=f"127.0.0.{i + 1}", port=41000 + i, block_size=block_size,
                               model="served")  # fmt: skip
        child = children.spawn(
            f"gpu-{i}",
            "worker",
            [sys.executable, "-c", "pass"],
            tmp_path / f"gpu-{i}.log",
            kv_events=source if publishes else None,
        )
        return _worker(i, uid=child.uid)

    workers = [register(0), register(1)]
    sources = kv_event_sources(workers, children)
    assert sources.endpoints == {
        workers[0].base_url: "tcp://127.0.0.1:41000",
        workers[1].base_url: "tcp://127.0.0.2:41001",
    }
    assert (sources.block_size, sources.model) == (16, "served")
    restarted = workers[1].model_copy(update={"uid": "an earlier start"})
    with pytest.raises(RuntimeError, match="gpu-1: no KV-event publisher is registered"):
        kv_event_sources([workers[0], restarted], children)
    with pytest.raises(RuntimeError, match="gpu-1: no KV-event publisher is registered"):
        kv_event_sources([workers[0], register(1, publishes=False)], children)
    with pytest.raises(RuntimeError, match="one block size and model"):
        kv_event_sources([workers[0], register(1, block_size=32)], children)
