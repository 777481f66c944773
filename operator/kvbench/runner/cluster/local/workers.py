"""Local workers: one process per pod of every pool, on its own loopback address, started by a
launcher (`launcher.py`): `kvbench sim` (`sim_workers.py`, its command line is here) or real
vLLM (`vllm_workers.py`).

The simulator takes the variant's vLLM arguments unchanged, plus the simulator-only flags
(timing profile, GPU memory, time scale, seed), and the engine's environment, so a variant
means the same thing here as on a GPU cluster. When a `kv_aware` router arm will follow the
workers' caches, every worker, simulated or not, also publishes vLLM KV events on a port of
its own that the back end picks and registers with the worker (`children.py`), which is where
the router's arm finds it (`arms.py`).
"""

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from kvbench.api import EngineSpec, ExperimentSpec, WorkerPool
from kvbench.loadgen.counters import parse_metrics
from kvbench.procs import free_port
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.children import Child, KvEventSource, LocalChildren
from kvbench.runner.cluster.local.launcher import WorkerLauncher, WorkerSlot

__all__ = [
    "LOCAL_NODE",
    "engine_env",
    "kv_events_args",
    "shared_gpu_of",
    "sim_command",
    "start_worker",
    "wait_serving",
    "worker_kv_events",
]


LOCAL_NODE = "local"
"""The node of every process the local back end starts: workers, arms, load generators."""


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
    shared_gpu: tuple[str, int] | None = None,
) -> list[str]:
    """The command line of one simulated worker; `shared_gpu` its (file, slot) on a GPU it
    shares (`shared_gpu_of`)."""
    args = engine.model_copy(update={"port": port}).vllm_args()
    command = [sys.executable, "-m", "kvbench", "sim", "serve", *args, "--host", host]
    command += ["--worker-id", name, "--seed", str(seed), *spec.simulator.flags(pool)]
    if shared_gpu is not None:
        command += ["--shared-gpu", shared_gpu[0], "--shared-gpu-slot", str(shared_gpu[1])]
    return command


def shared_gpu_of(pool: WorkerPool, index: int, where: str) -> tuple[str, int] | None:
    """The GPU the `index`-th worker of `pool` shares, as a (file under `where`, slot) pair,
    when the pool's `simulation.workersPerGpu` puts several on one; None when it has one."""
    per_gpu = pool.simulation.workers_per_gpu if pool.simulation is not None else 1
    if per_gpu == 1:
        return None
    return f"{where}/{pool.name}-gpu{index // per_gpu}.share", index % per_gpu


def worker_kv_events(
    spec: ExperimentSpec, engine: EngineSpec, host: str, taken: set[int]
) -> KvEventSource | None:
    """Where a worker at `host` publishes KV events, when an arm routes on them: a port free
    on every address (the publisher binds them all) and not in `taken` (other workers' ports
    not bound yet), the engine's block size and its served model name."""
    if not _needs_kv_events(spec):
        return None
    port = free_port("0.0.0.0")
    while port in taken:
        port = free_port("0.0.0.0")
    model = engine.served_model_name or engine.model
    return KvEventSource(host=host, port=port, block_size=engine.block_tokens, model=model)


def kv_events_args(source: KvEventSource) -> list[str]:
    """The flag that makes vLLM (or the simulator, which reads it the same way) publish there."""
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": source.bind_endpoint,
    }
    return ["--kv-events-config", json.dumps(config)]


def _ended(code: int | None) -> str:
    """How a process ended: its exit code, or the signal that killed it (the OOM killer's)."""
    if code is not None and code < 0:
        return f"was killed by signal {-code} ({signal.strsignal(-code)})"
    return f"exited with code {code}"


async def wait_serving(children: LocalChildren, child: Child, url: str, timeout: float) -> None:
    """Return once `url` answers 200; raise naming the process's log, with its last meaningful
    lines, if it exits first (RuntimeError) or does not answer within `timeout` seconds
    (TimeoutError)."""
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url, timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not children.alive(child):
                raise RuntimeError(
                    f"{child.name} {_ended(children.exit_code(child))} before serving; the end "
                    f"of its log {child.log}:\n{child.log_tail(15)}"
                )
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"{child.name} not serving {url} within {timeout:g} s; the end of its log "
                    f"{child.log}:\n{child.log_tail(15)}"
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
    """Start one worker (registered at once, with where it publishes KV events, so a cancelled
    start is still stopped by the teardown) and return it once `/health` answers, with the KV
    size its `/metrics` reports (none when it reports none: the configured size is never
    passed off as measured)."""
    host = block.address()
    port = free_port(host)
    started = time.monotonic()
    process = launcher.process(spec, engine, slot, host, port)
    taken = {c.kv_events.port for c in children.all("worker") if c.kv_events is not None}
    kv_events = worker_kv_events(spec, engine, host, taken | {port})
    argv = process.argv if kv_events is None else [*process.argv, *kv_events_args(kv_events)]
    child = children.spawn(
        slot.name,
        "worker",
        argv,
        log_dir / f"{slot.name}.log",
        env=process.env,
        kv_events=kv_events,
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
        node=LOCAL_NODE,
        image=image,
        engine_env_defaults=process.env_defaults,
        base_url=base,
        metrics_url=f"{base}/metrics",
        kv_cache_tokens=parse_metrics(slot.name, metrics).kv_cache_tokens,
        startup_seconds=round(startup, 3),
    )
