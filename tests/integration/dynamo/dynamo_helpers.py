"""Helpers of the Dynamo tests: is a process gone, send a few completions one by one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from kvbench.dynamo import DynamoDeployment
from kvbench.loadgen.client import Attempt, Client, encode_body
from kvbench.loadgen.records import RequestRecord, to_record
from kvbench.loadgen.workload import Request


def alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def command_line(pid: int) -> list[str]:
    """The argv of a live process."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


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
) -> list[RequestRecord]:
    """Send `prompts` sequentially (each after the previous finished) with the load
    generator's client, as an experiment sends them; a failed request fails the test."""
    url = f"{deployment.base_url}/v1/completions"
    model = deployment.spec.model_name

    async def run() -> list[Attempt]:
        attempts = []
        async with Client("new", 60.0, 10.0) as client:
            for index, prompt in enumerate(prompts):
                body = prompt if isinstance(prompt, str) else tuple(prompt)
                length = len(body.split()) if isinstance(body, str) else len(body)
                request = Request("measured", index, body, length, max_tokens)
                attempt = Attempt(request, url, time.perf_counter())
                await client.send(url, encode_body(request, model, "completions", True), attempt)
                attempts.append(attempt)
        return attempts

    origin = time.perf_counter()
    records = [to_record(attempt, origin) for attempt in asyncio.run(run())]
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    return records
