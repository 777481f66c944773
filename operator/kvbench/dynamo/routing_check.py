"""A seeded shared-prefix sequence sent through a deployment, summarised per worker.

This is the small harness behind the kv-versus-random check (tests and
`bench/dynamo_routing.py`); experiments go through kvbench's load generator instead.
Prompts are token ids: `prefixes` groups, each request its group's prefix followed by a
suffix of its own, in a seeded shuffled order, sent with at most `concurrency` in flight.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from kvbench.dynamo.client import complete
from kvbench.dynamo.nvext import RequestOutcome
from kvbench.dynamo.processes import DynamoDeployment

__all__ = [
    "RoutingSummary",
    "SequenceSpec",
    "WorkerShare",
    "run_sequence",
    "shared_prefix_prompts",
    "summarize",
]


class SequenceSpec(BaseModel):
    """The shape of a shared-prefix request sequence."""

    model_config = ConfigDict(frozen=True)

    seed: int = 0
    prefixes: int = Field(16, ge=1)
    requests_per_prefix: int = Field(20, ge=1)
    prefix_tokens: int = Field(512, ge=1)
    suffix_tokens: int = Field(32, ge=0)
    max_tokens: int = Field(8, ge=1)
    concurrency: int = Field(16, ge=1)
    token_low: int = Field(1000, ge=0)
    token_high: int = Field(30000, ge=1)


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
    mean_ttft_ms: float
    workers: list[WorkerShare]


def shared_prefix_prompts(spec: SequenceSpec) -> list[tuple[int, list[int]]]:
    """(group, token ids) for every request, in the order they are sent."""
    rng = random.Random(f"kvbench-dynamo-sequence/{spec.seed}")

    def draw(count: int) -> list[int]:
        return [rng.randrange(spec.token_low, spec.token_high) for _ in range(count)]

    prefixes = [draw(spec.prefix_tokens) for _ in range(spec.prefixes)]
    order = [g for g in range(spec.prefixes) for _ in range(spec.requests_per_prefix)]
    rng.shuffle(order)
    return [(group, prefixes[group] + draw(spec.suffix_tokens)) for group in order]


async def _send_all(
    base_url: str, model: str, prompts: Sequence[list[int]], max_tokens: int, concurrency: int
) -> list[RequestOutcome]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:

        async def one(prompt: list[int]) -> RequestOutcome:
            async with gate:
                return await complete(client, base_url, model, prompt, max_tokens)

        # Tasks reach the semaphore in creation order and it wakes waiters first come,
        # first served, so requests start in sequence order.
        return list(await asyncio.gather(*(one(prompt) for prompt in prompts)))


def run_sequence(
    deployment: DynamoDeployment, spec: SequenceSpec
) -> tuple[list[int], list[RequestOutcome]]:
    """Send the sequence in order; the groups of the requests and their outcomes."""
    sequence = shared_prefix_prompts(spec)
    outcomes = asyncio.run(
        _send_all(
            deployment.base_url,
            deployment.spec.model_name,
            [prompt for _, prompt in sequence],
            spec.max_tokens,
            spec.concurrency,
        )
    )
    return [group for group, _ in sequence], outcomes


def summarize(groups: Sequence[int], outcomes: Sequence[RequestOutcome]) -> RoutingSummary:
    """Hit rate, mean frontend-measured TTFT and per-worker shares of one run."""
    per_worker: dict[int, list[tuple[int, RequestOutcome]]] = {}
    for group, outcome in zip(groups, outcomes, strict=True):
        if outcome.worker_id is None or outcome.prompt_tokens is None:
            raise ValueError(f"a response lacks nvext.worker_id or usage: {outcome}")
        per_worker.setdefault(outcome.worker_id, []).append((group, outcome))
    shares = [
        WorkerShare(
            instance_id=instance_id,
            requests=len(served),
            prompt_tokens=sum(o.prompt_tokens or 0 for _, o in served),
            cached_tokens=sum(o.cached_tokens or 0 for _, o in served),
            groups=len({g for g, _ in served}),
        )
        for instance_id, served in sorted(per_worker.items())
    ]
    prompt = sum(s.prompt_tokens for s in shares)
    ttfts = [o.timing.ttft_ms for o in outcomes if o.timing and o.timing.ttft_ms is not None]
    return RoutingSummary(
        requests=len(outcomes),
        hit_rate=sum(s.cached_tokens for s in shares) / prompt if prompt else 0.0,
        mean_ttft_ms=sum(ttfts) / len(ttfts) if ttfts else 0.0,
        workers=shares,
    )
