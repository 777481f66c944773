"""A seeded shared-prefix sequence sent through a deployment, summarised per worker.

The harness behind the kv-versus-random check (tests and `bench/dynamo_routing.py`). It
sends what an experiment sends: the load generator's shared-prefix workload
(`kvbench.loadgen.workload.build_sequence`, token-id prompts, no warm-up) through its client
with Dynamo's `nvext` worker id, closed loop at `concurrency`. It leaves out the rest of a
run (counters, the result document), which `kvbench run` adds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from kvbench.api.load import Warmup
from kvbench.api.status import Point
from kvbench.api.workload import SharedPrefixWorkload, Workload
from kvbench.dynamo.processes import DynamoDeployment
from kvbench.loadgen.arrivals import Schedule, drive
from kvbench.loadgen.client import Attempt, Client, encode_body
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.records import RequestRecord, to_record
from kvbench.loadgen.workload import Request, build_sequence

__all__ = [
    "RoutingSummary",
    "SequenceSpec",
    "WorkerShare",
    "run_sequence",
    "summarize_routing",
]

_REQUEST_TIMEOUT = 120.0
_CONNECT_TIMEOUT = 10.0


class SequenceSpec(BaseModel):
    """The shape of a shared-prefix request sequence and how many are in flight."""

    model_config = ConfigDict(frozen=True)

    seed: int = 0
    prefixes: int = Field(16, ge=1, le=64)
    requests_per_prefix: int = Field(20, ge=1)
    prefix_tokens: int = Field(512, ge=1)
    suffix_tokens: int = Field(32, ge=1)
    max_tokens: int = Field(8, ge=1)
    concurrency: int = Field(16, ge=1)

    def requests(self) -> list[Request]:
        """The measured requests, `prefixes x requests_per_prefix` of them, in sending order."""
        workload = Workload(
            shared_prefix=SharedPrefixWorkload(
                prefixes=[self.prefixes],
                prefix_tokens=self.prefix_tokens,
                suffix_tokens=self.suffix_tokens,
                output_tokens=self.max_tokens,
                requests_per_prefix=self.requests_per_prefix,
                min_requests=1,
            )
        )
        point = Point(concurrency=self.concurrency, prefixes=self.prefixes)
        sequence = build_sequence(
            workload, point, self.seed, Warmup(requests_per_prefix=0), TokenSpace()
        )
        return sequence.measured


class WorkerShare(BaseModel):
    """What one worker got of the sequence, from the requests' `nvext` and usage."""

    model_config = ConfigDict(frozen=True)

    instance_id: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    groups: int = Field(description="Distinct prefix groups the worker served")


class RoutingSummary(BaseModel):
    """Hit rate (cached / prompt tokens over all requests) and the per-worker split."""

    model_config = ConfigDict(frozen=True)

    requests: int
    hit_rate: float
    mean_ttft_ms: float = Field(description="Client-measured, first token chunk after sending")
    workers: list[WorkerShare]


async def _send_all(
    base_url: str, model: str, requests: list[Request], concurrency: int
) -> list[Attempt]:
    url = f"{base_url}/v1/completions"
    bodies = [encode_body(r, model, "completions", nvext=True) for r in requests]
    attempts = [Attempt(r, url, 0.0) for r in requests]
    async with Client("new", _REQUEST_TIMEOUT, _CONNECT_TIMEOUT) as client:

        async def send(request: Request, due: float) -> None:
            attempt = attempts[request.index]
            attempt.due = due
            await client.send(url, bodies[request.index], attempt)

        await drive(requests, Schedule("closed", cap=concurrency), send)
    return attempts


def run_sequence(deployment: DynamoDeployment, spec: SequenceSpec) -> list[RequestRecord]:
    """Send the sequence in order through the frontend; one record per request."""
    origin = time.perf_counter()
    attempts = asyncio.run(
        _send_all(
            deployment.base_url, deployment.spec.model_name, spec.requests(), spec.concurrency
        )
    )
    return [to_record(attempt, origin) for attempt in attempts]


def summarize_routing(records: Sequence[RequestRecord]) -> RoutingSummary:
    """Hit rate, mean TTFT and per-worker shares of one run; failed requests are refused."""
    per_worker: dict[int, list[RequestRecord]] = {}
    for record in records:
        if not record.ok or record.worker_id is None or record.prompt_tokens is None:
            raise ValueError(f"a request failed or lacks nvext.worker_id or usage: {record}")
        per_worker.setdefault(record.worker_id, []).append(record)
    shares = [
        WorkerShare(
            instance_id=instance_id,
            requests=len(served),
            prompt_tokens=sum(r.prompt_tokens or 0 for r in served),
            cached_tokens=sum(r.cached_tokens or 0 for r in served),
            groups=len({r.group for r in served}),
        )
        for instance_id, served in sorted(per_worker.items())
    ]
    prompt = sum(s.prompt_tokens for s in shares)
    ttfts = [r.ttft for r in records if r.ttft is not None]
    return RoutingSummary(
        requests=len(records),
        hit_rate=sum(s.cached_tokens for s in shares) / prompt if prompt else 0.0,
        mean_ttft_ms=1000 * sum(ttfts) / len(ttfts) if ttfts else 0.0,
        workers=shares,
    )
