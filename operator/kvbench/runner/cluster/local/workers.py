"""Local workers: one process per pod of every pool, on its own loopback address, started by a
launcher (`launcher.py`): `kvbench sim` (`sim_workers.py`, its command line is here) or real
vLLM (`vllm_workers.py`).

The simulator takes the variant's vLLM arguments unchanged, plus the simulator-only flags
(timing profile, GPU memory, time scale, seed), and the engine's environment, so a variant
means the same thing here as on a GPU cluster. When a `kv_aware` router arm will follow the
workers' caches, each worker also publishes vLLM KV events on its own loopback address (port
chosen by the OS; `/version` tells the router's arm where, see `arms.py`).
"""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx

from kvbench.api import EngineSpec, ExperimentSpec, WorkerPool
from kvbench.loadgen.counters import parse_metrics
from kvbench.procs import free_port
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.children import Child, LocalChildren
from kvbench.runner.cluster.local.launcher import WorkerLauncher, WorkerSlot

__all__ = ["engine_env", "sim_command", "start_worker", "wait_serving"]


def _needs_kv_events(spec: ExperimentSpec) -> bool:
    """Whether an arm of the experiment routes on the workers' KV events (`kv_aware`)."""
    return any(arm.router is not None and arm.router.policy == "kv_aware" for arm in spec.routing)


def engine_env(engine: EngineSpec) -> dict[str, str]:
    """This process's environment with the engine's own variables on top (values only:
    the preflight refuses `valueFrom`, which needs a cluster's Secrets)."""
    env = dict(os.environ)
    env.update({var.name: var.value for var in engine.env if var.value is not None})
    return env


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
    args = engine.model_copy(update={"port": port}).vllm_args()
    command = [sys.executable, "-m", "kvbench", "sim", "serve", *args, "--host", host]
    command += ["--worker-id", name, "--seed", str(seed), *spec.simulator.flags(pool)]
    if _needs_kv_events(spec):
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://{host}:*"}
        command += ["--kv-events-config", json.dumps(events)]
    return command


async def wait_serving(children: LocalChildren, child: Child, url: str, timeout: float) -> None:
    """Return once `url` answers 200; raise with the process's log tail if it exits first
    (RuntimeError) or does not answer within `timeout` seconds (TimeoutError)."""
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url, timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not children.alive(child):
                code = children.exit_code(child)
                raise RuntimeError(
                    f"{child.name} exited (code {code}) before serving:\n{child.log_tail(15)}"
                )
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"{child.name} not serving {url} within {timeout:g} s:\n{child.log_tail(15)}"
                )
            await asyncio.sleep(0.1)


async def start_worker(
    launcher: WorkerLauncher,
    spec: ExperimentSpec,
    engine: EngineSpec,
    slot: WorkerSlot,
    block: LoopbackBlock,
    children: LocalChildren,
    log_dir: Path,
    timeout: float,
) -> WorkerInfo:
    """Start one worker (registered at once, so a cancelled start is still stopped by the
    teardown) and return it once `/health` answers, with the KV size its `/metrics` reports
    (none when it reports none: the configured size is never passed off as measured)."""
    host = block.address()
    port = free_port(host)
    started = time.monotonic()
    process = launcher.process(spec, engine, slot, host, port)
    child = children.spawn(
        slot.name, "worker", process.argv, log_dir / f"{slot.name}.log", env=process.env
    )
    base = f"http://{host}:{port}"
    await wait_serving(children, child, f"{base}/health", timeout)
    startup = time.monotonic() - started
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{base}/metrics", timeout=5.0)).text
        image = await launcher.image(client, base)
    return WorkerInfo(
        name=slot.name,
        pool=slot.pool.name,
        uid=child.uid,
        node="local",
        image=image,
        base_url=base,
        metrics_url=f"{base}/metrics",
        kv_cache_tokens=parse_metrics(slot.name, metrics).kv_cache_tokens,
        startup_seconds=round(startup, 3),
    )
