"""Process entry of the simulator: logging like vLLM and uvicorn, start-up, shutdown.

vLLM logs to stdout as ``INFO 08-06 21:18:16 [file.py:123] message``; uvicorn logs
``INFO:     Uvicorn running on http://host:port (Press CTRL+C to quit)`` to stderr.
Scripts that grep either keep working against the simulator.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from kvbench.sim.capacity import InsufficientKVCacheError
from kvbench.sim.config import SimConfig
from kvbench.sim.factory import build_engine
from kvbench.sim.geometry import UnknownModelError
from kvbench.sim.gpu_share import FileGpuShare
from kvbench.sim.kv_events import ZmqEventPublisher
from kvbench.sim.server import SimServer, start_server

GIL_SWITCH_INTERVAL = 0.0005
"""Seconds a thread may hold the GIL while the event loop waits for it (Python's default is
5 ms): a request tokenized in a worker thread must not hold back a token due meanwhile."""

__all__ = ["configure_logging", "run", "serve"]

logger = logging.getLogger("kvbench.sim")
uvicorn_logger = logging.getLogger("kvbench.sim.uvicorn")


def configure_logging() -> None:
    """vLLM-format lines on stdout, uvicorn-format lines on stderr."""
    vllm_handler = logging.StreamHandler(sys.stdout)
    vllm_handler.setFormatter(
        logging.Formatter(
            "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
            datefmt="%m-%d %H:%M:%S",
        )
    )
    logger.handlers[:] = [vllm_handler]
    logger.setLevel(logging.INFO)
    uvicorn_handler = logging.StreamHandler(sys.stderr)
    uvicorn_handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    uvicorn_logger.handlers[:] = [uvicorn_handler]
    uvicorn_logger.propagate = False
    uvicorn_logger.setLevel(logging.INFO)


def _shared_gpu(config: SimConfig) -> FileGpuShare | None:
    """This worker's place on a GPU other `kvbench sim` processes share (`--shared-gpu`)."""
    if config.shared_gpu is None or config.shared_gpu_slot is None:
        return None
    if config.time_scale == 0:
        raise ValueError(
            "--shared-gpu needs --time-scale > 0: workers share a GPU on the wall clock"
        )
    logger.info("GPU shared with the workers of %s, slot %d", config.shared_gpu,
                config.shared_gpu_slot)  # fmt: skip
    return FileGpuShare(Path(config.shared_gpu), config.shared_gpu_slot)


async def serve(config: SimConfig, unknown_flags: list[str] | None = None) -> int:
    """Build the engine, log vLLM's start-up lines, serve until SIGINT/SIGTERM."""
    for flag in unknown_flags or []:
        logger.warning("Ignoring vLLM argument the simulator does not model: %s", flag)
    publisher = None
    if config.kv_events_config is not None and config.kv_events_config.active:
        publisher = ZmqEventPublisher(config.kv_events_config, block_size=config.block_size)
        logger.info("Starting ZMQ publisher on %s", publisher.last_endpoint)
    try:
        gpu = _shared_gpu(config)
        sim = build_engine(config, on_kv_events=publisher.publish if publisher else None, gpu=gpu)
    except (InsufficientKVCacheError, UnknownModelError, ValueError, OSError) as exc:
        logger.error("%s", exc)
        if publisher is not None:
            publisher.close()
        return 1
    logger.info(
        "kvbench sim: model=%s profile=%s (%s) time_scale=%s seed=%d",
        config.model, sim.profile.name, sim.profile.source, config.time_scale, config.seed,
    )  # fmt: skip
    logger.info(
        "max_model_len=%d max_num_seqs=%d max_num_batched_tokens=%d prefix_caching=%s "
        "hash_algo=%s tokenizer=%s",
        sim.max_model_len, sim.max_num_seqs, sim.max_num_batched_tokens,
        config.enable_prefix_caching, config.prefix_caching_hash_algo,
        config.tokenizer or "stand-in",
    )  # fmt: skip
    for line in sim.capacity.lines:
        logger.info("%s", line)
    try:
        server = SimServer(
            sim, kv_events_endpoint=publisher.last_endpoint if publisher is not None else None
        )
    except (ValueError, ImportError, OSError) as exc:
        logger.error("cannot load tokenizer %s: %s", config.tokenizer, exc)
        if publisher is not None:
            publisher.close()
        return 1
    # vLLM ends on SIGTERM while it initializes too (its setup_server's handler): a pod deleted
    # while it loads goes at once, not after its grace period (PID 1 ignores an unhandled TERM).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if config.load_seconds > 0:
        logger.info("Loading model weights (%.1f s, --load-seconds)", config.load_seconds)
        try:
            await asyncio.wait_for(stop.wait(), config.load_seconds)
        except TimeoutError:
            pass
        else:
            logger.info("Terminated while loading")
            if publisher is not None:
                publisher.close()
            return 0
    host = config.host or "0.0.0.0"
    uvicorn_logger.info("Started server process [%d]", os.getpid())
    uvicorn_logger.info("Waiting for application startup.")
    running = await start_server(server, host, config.port, publisher)
    uvicorn_logger.info("Application startup complete.")
    uvicorn_logger.info(
        "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", host, running.port
    )
    logger.info("Worker %s ready", server.worker)
    await stop.wait()
    uvicorn_logger.info("Shutting down")
    await running.close()
    uvicorn_logger.info("Finished server process [%d]", os.getpid())
    return 0


def run(config: SimConfig, unknown_flags: list[str] | None = None) -> int:
    """Run the simulator in this process (uvloop if available); returns an exit code."""
    configure_logging()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config, unknown_flags))
    return uvloop.run(serve(config, unknown_flags))
