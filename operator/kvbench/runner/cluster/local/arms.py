"""What stands between the load generator and the local workers, per routing arm.

service          a per-connection random balancer, as kube-proxy does for a ClusterIP
                 (`service.py`, its own process)
router           the real vllm-router (from PyPI) started in front of the workers
prefix-affinity  nothing: the load generator hashes each prefix group to one worker
session-affinity nothing: the load generator sends each conversation to one worker

vllm-router's `kv_aware` policy follows the workers' caches through their vLLM KV events: it
subscribes to each worker's ZMQ publisher (`--kv-event-source URL=ENDPOINT`, where the back end
told the worker to publish and registered it, see `workers.py`; simulated and real vLLM workers
alike) and learns a request's token ids from the workers' `/tokenize`. It needs no tokenizer or
model files of its own.
"""

import asyncio
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kvbench.api.routing import RouterArm, RoutingArm
from kvbench.procs import free_port
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.kv_events import KvEventFeed, router_log_filter
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.children import Child, LocalChildren
from kvbench.runner.cluster.local.service import service_command
from kvbench.runner.cluster.local.workers import wait_serving

__all__ = [
    "KvEventSources",
    "kv_event_sources",
    "open_local_arm",
    "router_binary",
    "router_command",
]


def router_binary() -> str:
    """vllm-router's launcher, next to this Python first (a venv need not be on PATH)."""
    beside = Path(sys.executable).with_name("vllm-router")
    found = str(beside) if beside.exists() else shutil.which("vllm-router")
    if found is None:
        raise RuntimeError("vllm-router is not installed: pip install vllm-router")
    return found


@dataclass(frozen=True)
class KvEventSources:
    """Where the workers publish KV events, and the cache identity they share."""

    endpoints: dict[str, str]
    """Worker base URL -> its ZMQ PUB endpoint."""
    block_size: int
    model: str


def kv_event_sources(workers: list[WorkerInfo], children: LocalChildren) -> KvEventSources:
    """Where each worker publishes KV events, as registered when it was started (this start of
    it: the uid must match)."""
    endpoints: dict[str, str] = {}
    identities: set[tuple[int, str]] = set()
    for worker in workers:
        child = children.get(worker.name)
        if child is None or child.uid != worker.uid or child.kv_events is None:
            raise RuntimeError(
                f"worker {worker.name}: no KV-event publisher is registered for this start of "
                "it, and vllm-router's kv_aware policy follows the workers' KV events"
            )
        endpoints[worker.base_url] = child.kv_events.endpoint
        identities.add((child.kv_events.block_size, child.kv_events.model))
    if len(identities) != 1:
        raise RuntimeError(
            f"kv_aware needs one block size and model across workers, got {sorted(identities)}"
        )
    [(block_size, model)] = identities
    return KvEventSources(endpoints, block_size, model)


def router_command(
    arm: RouterArm,
    workers: list[WorkerInfo],
    host: str,
    port: int,
    metrics_port: int,
    kv_events: KvEventSources | None = None,
) -> list[str]:
    """The vllm-router command line for these workers (`kv_events` is needed by `kv_aware`)."""
    if arm.implementation != "vllm-router":
        raise RuntimeError(f"router {arm.implementation} is not available locally; use vllm-router")
    kv_args: list[str] = []
    if arm.policy == "kv_aware":
        if kv_events is None:
            raise RuntimeError("vllm-router's kv_aware policy needs the workers' KV event sources")
        endpoints = {w.base_url: kv_events.endpoints[w.base_url] for w in workers}
        feed = KvEventFeed(
            endpoints=endpoints, block_size=kv_events.block_size, model=kv_events.model
        )
        kv_args = feed.router_args()
    return [
        router_binary(),
        "--host",
        host,
        "--port",
        str(port),
        "--policy",
        arm.policy,
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(metrics_port),
        "--worker-urls",
        *(w.base_url for w in workers),
        *kv_args,
        *arm.extra_args,
    ]


async def open_local_arm(
    arm: RoutingArm,
    workers: list[WorkerInfo],
    block: LoopbackBlock,
    children: LocalChildren,
    names: ChildNames,
    log_dir: Path,
    timeout: float,
    seed: str,
) -> ArmEndpoint:
    """Start what `arm` needs (registered as the child `names.arm`) and return where the load
    generator should send; `seed` makes the Service stand-in's per-connection choices
    repeatable."""
    if arm.service is not None:
        backends = []
        for worker in workers:
            url = urlsplit(worker.base_url)
            backends.append((url.hostname or "", url.port or 80))
        host = block.address()
        port = free_port(host)
        child = children.spawn(
            names.arm,
            "arm",
            service_command(host, port, seed, backends),
            log_dir / f"{names.arm}.log",
            owner=names.prefix,
        )
        await _wait_listening(children, child, host, port, timeout)
        return UrlEndpoint(arm=arm.name, url=f"http://{host}:{port}")
    if arm.router is not None:
        host = block.address()
        port, metrics_port = free_port(host), free_port(host)
        kv_aware = arm.router.policy == "kv_aware"
        kv_events = kv_event_sources(workers, children) if kv_aware else None
        # kv_aware: the log counts the KV event batches the router receives (`check_arm`).
        log_filter = {"RUST_LOG": router_log_filter(arm.router.extra_args)} if kv_aware else {}
        child = children.spawn(
            names.arm,
            "arm",
            router_command(arm.router, workers, host, port, metrics_port, kv_events),
            log_dir / f"{names.arm}.log",
            env={**os.environ, **log_filter},
            owner=names.prefix,
        )
        await wait_serving(children, child, f"http://{host}:{port}/health", timeout)
        return UrlEndpoint(arm=arm.name, url=f"http://{host}:{port}")
    if arm.affinity:
        return PodsEndpoint(arm=arm.name, pods={w.name: w.base_url for w in workers})
    assert arm.external is not None
    return UrlEndpoint(arm=arm.name, url=arm.external.url)


async def _wait_listening(
    children: LocalChildren, child: Child, host: str, port: int, timeout: float
) -> None:
    """Return once `host:port` accepts a connection; fail with the log if the child exits."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
            writer.close()
            return
        except OSError:
            pass
        if not children.alive(child):
            raise RuntimeError(f"{child.name} exited before listening:\n{child.log_tail(15)}")
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{child.name} not listening on {host}:{port} in {timeout:g} s")
        await asyncio.sleep(0.05)
