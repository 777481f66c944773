"""What stands between the load generator and the local workers, per routing arm.

service          a per-connection random balancer, as kube-proxy does for a ClusterIP
router           the real vllm-router (from PyPI) started in front of the workers
prefix-affinity  nothing: the load generator hashes each prefix group to one worker

vllm-router's `kv_aware` policy follows the workers' caches through their vLLM KV events: it
subscribes to each worker's ZMQ publisher (`--kv-event-source URL=ENDPOINT`, which the workers
report in `/version`, see `workers.py`) and learns a request's token ids from the workers'
`/tokenize`. It needs no tokenizer or model files of its own.
"""

import asyncio
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from kvbench.api.routing import RouterArm, RoutingArm
from kvbench.netbalance import TcpBalancer
from kvbench.procs import ManagedProcess, free_port
from kvbench.runner.cluster.base import Target, WorkerInfo
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.health import wait_healthy

__all__ = [
    "KvEventSources",
    "OpenArm",
    "kv_event_sources",
    "open_local_arm",
    "router_binary",
    "router_command",
]


class OpenArm:
    """An arm in front of the workers; `close` stops whatever it started."""

    def __init__(
        self,
        target: Target,
        balancer: TcpBalancer | None = None,
        process: ManagedProcess | None = None,
    ) -> None:
        self.target = target
        self.balancer = balancer
        self.process = process

    async def close(self) -> None:
        if self.balancer is not None:
            await self.balancer.close()
        if self.process is not None:
            await asyncio.to_thread(self.process.stop)


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


async def kv_event_sources(workers: list[WorkerInfo]) -> KvEventSources:
    """Ask each worker (`/version`, `/v1/models`) where its KV events are published."""
    endpoints: dict[str, str] = {}
    block_sizes: set[int] = set()
    async with httpx.AsyncClient() as client:
        for worker in workers:
            info = (await client.get(f"{worker.base_url}/version", timeout=5.0)).json()
            sim = info.get("kvbench_sim") or {}
            endpoint = sim.get("kv_events_endpoint")
            if not endpoint:
                raise RuntimeError(
                    f"worker {worker.name} publishes no KV events, which vllm-router's kv_aware "
                    "policy follows; start it with --kv-events-config"
                )
            endpoints[worker.base_url] = endpoint
            block_sizes.add(int(sim["block_size"]))
        models = (await client.get(f"{workers[0].base_url}/v1/models", timeout=5.0)).json()
    if len(block_sizes) != 1:
        raise RuntimeError(f"kv_aware needs one block size across workers, got {block_sizes}")
    return KvEventSources(endpoints, block_sizes.pop(), models["data"][0]["id"])


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
        for worker in workers:
            kv_args += [
                "--kv-event-source",
                f"{worker.base_url}={kv_events.endpoints[worker.base_url]}",
            ]
        kv_args += ["--kv-event-block-size", str(kv_events.block_size)]
        kv_args += ["--kv-event-model", kv_events.model]
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
    log_dir: Path,
    timeout: float,
    rng: random.Random,
) -> OpenArm:
    """Start what `arm` needs and return where the load generator should send; `rng` makes
    the Service stand-in's per-connection choices repeatable."""
    if arm.service is not None:
        backends = []
        for worker in workers:
            url = urlsplit(worker.base_url)
            backends.append((url.hostname or "", url.port or 80))
        host = block.address()
        balancer = TcpBalancer(host, free_port(host), lambda: backends, rng)
        await balancer.start()
        return OpenArm(Target(arm=arm.name, url=f"http://{host}:{balancer.port}"), balancer)
    if arm.router is not None:
        host = block.address()
        port, metrics_port = free_port(host), free_port(host)
        kv_events = await kv_event_sources(workers) if arm.router.policy == "kv_aware" else None
        process = ManagedProcess(
            f"router-{arm.name}",
            router_command(arm.router, workers, host, port, metrics_port, kv_events),
            log_dir / f"router-{arm.name}.log",
        )
        process.start()
        try:
            await wait_healthy(process, f"http://{host}:{port}/health", timeout)
        except BaseException:
            await asyncio.to_thread(process.stop)
            raise
        return OpenArm(Target(arm=arm.name, url=f"http://{host}:{port}"), process=process)
    if arm.prefix_affinity is not None:
        return OpenArm(Target(arm=arm.name, pod_urls=[w.base_url for w in workers]))
    assert arm.external is not None
    return OpenArm(Target(arm=arm.name, url=arm.external.url))
