"""Dynamo's `nvext` extension of OpenAI requests and responses: who served a request, and
how much of its prompt was cached.

Request: `"nvext": {"extra_fields": ["worker_id", "timing"]}` asks Dynamo 1.6.1's frontend
to add, to its responses,

- `nvext.worker_id`: `prefill_worker_id`, `decode_worker_id` (instance ids, decimal;
  equal for aggregated workers) and their `prefill_dp_rank`, `decode_dp_rank`; in every
  streamed chunk;
- `nvext.timing`: `request_received_ms` (Unix ms), `prefill_wait_time_ms`,
  `prefill_time_ms`, `ttft_ms`, `total_time_ms`, `kv_hit_rate` (the router's predicted
  overlap of the prompt's blocks with the chosen worker's cache, 0 outside kv mode) and
  `router_queue_depth`; in the chunk carrying `finish_reason`.

Cached tokens are OpenAI's own field, `usage.prompt_tokens_details.cached_tokens`, in the
final usage chunk (`stream_options.include_usage`): the prompt tokens the worker's engine
found in its prefix cache, whole blocks only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "NVEXT_REQUEST",
    "NvextTiming",
    "NvextWorker",
    "RequestOutcome",
    "outcome_from_chunks",
    "sse_data",
]

NVEXT_REQUEST: dict[str, Any] = {"extra_fields": ["worker_id", "timing"]}


class NvextWorker(BaseModel):
    """`nvext.worker_id`: which instance(s) served the request."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    prefill_worker_id: int | None = None
    decode_worker_id: int | None = None
    prefill_dp_rank: int | None = None
    decode_dp_rank: int | None = None


class NvextTiming(BaseModel):
    """`nvext.timing`, as the frontend measured it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    request_received_ms: float | None = None
    prefill_wait_time_ms: float | None = None
    prefill_time_ms: float | None = None
    ttft_ms: float | None = None
    total_time_ms: float | None = None
    kv_hit_rate: float | None = None
    router_queue_depth: int | None = None


class RequestOutcome(BaseModel):
    """What one (streamed or not) completion says about itself."""

    model_config = ConfigDict(frozen=True)

    chunks: int
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    worker: NvextWorker | None
    timing: NvextTiming | None

    @property
    def worker_id(self) -> int | None:
        """The instance that ran prefill (the one whose cache the prompt met)."""
        if self.worker is None:
            return None
        return self.worker.prefill_worker_id or self.worker.decode_worker_id


def outcome_from_chunks(chunks: Iterable[dict[str, Any]]) -> RequestOutcome:
    """Fold the JSON objects of a response (one, or each SSE `data:` chunk) into one outcome."""
    count, text = 0, []
    usage: dict[str, Any] | None = None
    worker: NvextWorker | None = None
    timing: NvextTiming | None = None
    for chunk in chunks:
        count += 1
        for choice in chunk.get("choices") or []:
            text.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
        if chunk.get("usage"):
            usage = chunk["usage"]
        nvext = chunk.get("nvext") or {}
        if "worker_id" in nvext:
            worker = NvextWorker.model_validate(nvext["worker_id"])
        if "timing" in nvext:
            timing = NvextTiming.model_validate(nvext["timing"])
    details = (usage or {}).get("prompt_tokens_details") or {}
    return RequestOutcome(
        chunks=count,
        text="".join(text),
        prompt_tokens=(usage or {}).get("prompt_tokens"),
        completion_tokens=(usage or {}).get("completion_tokens"),
        cached_tokens=details.get("cached_tokens"),
        worker=worker,
        timing=timing,
    )


def sse_data(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The JSON objects of an SSE stream's `data:` lines, up to `[DONE]`."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)
