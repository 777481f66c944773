"""Helpers of the Dynamo tests: is a process gone, run a few completions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from kvbench.dynamo import DynamoDeployment, RequestOutcome, complete


def alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def wait_gone(pids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """The pids still alive after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    return left


def one_by_one(
    deployment: DynamoDeployment, prompts: Sequence[Sequence[int] | str], max_tokens: int = 4
) -> list[RequestOutcome]:
    """Send `prompts` sequentially (each after the previous finished), streamed."""

    async def run() -> list[RequestOutcome]:
        async with httpx.AsyncClient(timeout=60.0) as client:
            return [
                await complete(
                    client, deployment.base_url, deployment.spec.model_name, p, max_tokens
                )
                for p in prompts
            ]

    return asyncio.run(run())
