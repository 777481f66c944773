"""Waiting for a local process to serve: poll its health URL, fail early with its log."""

import asyncio
import time

import httpx

from kvbench.procs import ManagedProcess

__all__ = ["wait_healthy"]


async def wait_healthy(process: ManagedProcess, url: str, timeout: float) -> None:
    """Return once `url` answers 200; raise with the process's log tail if it exits first or
    does not answer within `timeout` seconds."""
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url, timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not process.running():
                raise RuntimeError(f"{process.name} exited\n{process.describe_failure()}")
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"{process.name} not healthy in {timeout:g}s\n{process.describe_failure()}"
                )
            await asyncio.sleep(0.1)
