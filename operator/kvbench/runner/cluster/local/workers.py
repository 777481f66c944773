"""Local workers: one `kvbench sim` process per pod of every pool, on its own loopback address.

The simulator takes the variant's vLLM arguments unchanged, plus the simulator-only flags
(timing profile, GPU memory, time scale, seed), so a variant means the same thing here as on a
GPU cluster. When a `kv_aware` router arm will follow the workers' caches, each worker also
publishes vLLM KV events on its own loopback address (port chosen by the OS; `/version` tells
the router's arm where, see `arms.py`).
"""

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvbench.api import EngineSpec, ExperimentSpec, WorkerPool
from kvbench.procs import ManagedProcess, free_port
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.health import wait_healthy

__all__ = ["LocalWorker", "kv_cache_tokens", "sim_command", "start_worker"]


class LocalWorker:
    """A running simulator process and what the runner knows of it."""

    def __init__(self, info: WorkerInfo, process: ManagedProcess) -> None:
        self.info = info
        self.process = process

    async def stop(self) -> None:
        await asyncio.to_thread(self.process.stop)


def _needs_kv_events(spec: ExperimentSpec) -> bool:
    """Whether an arm of the experiment routes on the workers' KV events (`kv_aware`)."""
    return any(arm.router is not None and arm.router.policy == "kv_aware" for arm in spec.routing)


def sim_command(
    spec: ExperimentSpec,
    engine: EngineSpec,
    pool: WorkerPool,
    name: str,
    host: str,
    port: int,
    seed: int,
) -> list[str]:
    """The command line of one simulated worker."""
    sim = spec.simulator
    args = engine.model_copy(update={"port": port}).vllm_args()
    command = [sys.executable, "-m", "kvbench", "sim", "serve", *args, "--host", host]
    command += ["--worker-id", name, "--time-scale", f"{sim.time_scale:g}", "--seed", str(seed)]
    profile = (pool.simulation and pool.simulation.profile) or sim.profile
    if profile:
        command += ["--profile", profile]
    gpu_bytes = (pool.simulation and pool.simulation.gpu_memory_bytes) or sim.gpu_memory_bytes
    if gpu_bytes:
        command += ["--gpu-memory-bytes", str(gpu_bytes)]
    if sim.kv_capacity_jitter:
        command += ["--kv-capacity-jitter", f"{sim.kv_capacity_jitter:g}"]
    if _needs_kv_events(spec):
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://{host}:*"}
        command += ["--kv-events-config", json.dumps(events)]
    return command


def kv_cache_tokens(metrics_text: str) -> int | None:
    """KV cache size of a server start, from vLLM's `cache_config_info` (blocks x block size)."""
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "vllm:cache_config_info":
            for sample in family.samples:
                labels = sample.labels
                if "num_gpu_blocks" in labels and "block_size" in labels:
                    return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return None


async def start_worker(
    spec: ExperimentSpec,
    engine: EngineSpec,
    pool: WorkerPool,
    name: str,
    block: LoopbackBlock,
    seed: int,
    log_dir: Path,
    timeout: float,
) -> LocalWorker:
    """Start one simulator and return it once `/health` answers; its log explains failures."""
    host = block.address()
    port = free_port(host)
    process = ManagedProcess(
        name, sim_command(spec, engine, pool, name, host, port, seed), log_dir / f"{name}.log"
    )
    started = time.monotonic()
    process.start()
    base = f"http://{host}:{port}"
    try:
        await wait_healthy(process, f"{base}/health", timeout)
        startup = time.monotonic() - started
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{base}/metrics", timeout=5.0)).text
    except BaseException:
        await asyncio.to_thread(process.stop)
        raise
    info = WorkerInfo(
        name=name,
        pool=pool.name,
        node="local",
        base_url=base,
        metrics_url=f"{base}/metrics",
        kv_cache_tokens=kv_cache_tokens(metrics),
        startup_seconds=round(startup, 3),
    )
    return LocalWorker(info, process)
