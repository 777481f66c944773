"""Per-request records: what one request did, on the wall clock and (under the simulator) on
the server's simulated clock. Failed requests are records too, with their error.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field
from pydantic_core import PydanticUndefined

from kvbench.api.base import ApiModel

if TYPE_CHECKING:
    from kvbench.loadgen.client import Attempt
    from kvbench.loadgen.workload import Request

__all__ = [
    "ErrorKind",
    "RequestRecord",
    "SimTiming",
    "e2e_field",
    "request_identity",
    "sim_timing",
    "to_record",
]

ErrorKind = Literal[
    "http",  # the server answered with a status other than 200 (its body in `error`)
    "stream",  # the server reported an error inside the stream (an `{"error": ...}` event)
    "malformed",  # the stream broke the protocol: an event that is not a JSON object, or
    # one of more than client.MAX_EVENT_BYTES
    "incomplete",  # the stream ended without `data: [DONE]`
    "disconnected",  # the connection closed, or the body broke off, before the end
    "timeout",  # no complete answer within requestTimeout (a stall, before or mid-stream)
    "connect-timeout",  # no connection within connectTimeout
    "connect",  # the connection was refused or could not be made
    "client",  # anything else that went wrong in the client
    "cancelled",  # the run was stopped before the request finished
    "abandoned",  # never sent: an earlier turn of its conversation failed
]
"""Why a request failed; the first failure wins (later ones are its consequences)."""


def e2e_field(default: Any = PydanticUndefined, **kwargs: Any) -> Any:
    """A field named `e2e`, keyed `e2e` as the docs say (camelCase would make it `e2E`);
    documents written with `e2E` before still read."""
    return Field(
        default,
        validation_alias=AliasChoices("e2e", "e2E"),
        serialization_alias="e2e",
        **kwargs,
    )


def _r(x: float) -> float:
    """Microsecond precision keeps the document small and loses nothing measurable."""
    return round(x, 6)


class SimTiming(ApiModel):
    """The simulator's own account of a request (its `kvbench` extension), in simulated
    seconds: free of client and loopback overhead, which a 20x speed-up would magnify."""

    worker: str | None = None
    arrival: float | None = Field(None, description="Arrival on the worker's own clock")
    ttft: float | None = None
    e2e: float | None = e2e_field(None)
    queue: float | None = Field(None, description="First scheduled minus arrival")
    itl: list[float] = Field(default_factory=list)
    preemptions: int | None = None
    cached_tokens: int | None = None
    time_scale: float | None = None


class RequestRecord(ApiModel):
    """One request. Times are seconds from the run's start (wall clock)."""

    phase: Literal["warmup", "measured"]
    index: int
    role: str = "request"
    group: int | None = None
    conversation: int | None = Field(None, description="Conversation workloads: which one")
    turn: int | None = Field(None, description="Conversation workloads: its turn, from 1")
    endpoint: str = Field(..., description="Pod (prefix-affinity) or target URL")
    due: float = Field(..., description="When the schedule wanted it sent")
    start: float = Field(..., description="When it was sent")
    end: float
    ttft: float | None = None
    e2e: float | None = e2e_field(None)
    itl: list[float] = Field(default_factory=list, description="Every gap between token chunks")
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = Field(None, description="usage.prompt_tokens_details")
    worker_id: int | None = Field(None, description="The serving worker a front end reported")
    status: int | None = None
    error_kind: str | None = Field(None, description="One of `ErrorKind`")
    error: str | None = None
    sim: SimTiming | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def hit(self) -> bool | None:
        """Whether the server reused cached prompt tokens (None when it did not say)."""
        return None if self.cached_tokens is None else self.cached_tokens > 0


def sim_timing(ext: dict[str, Any]) -> SimTiming:
    """The extension's timestamps as durations; `token_times` may or may not include the
    first token, so it is prepended when missing."""

    def num(key: str) -> float | None:
        value = ext.get(key)
        return float(value) if isinstance(value, int | float) else None

    arrival, first, finish = num("arrival_time"), num("first_token_time"), num("finish_time")
    scheduled = num("first_scheduled_time")
    times = [float(t) for t in ext.get("token_times") or []]
    if first is not None and (not times or abs(times[0] - first) > 1e-9):
        times.insert(0, first)
    preemptions, cached = ext.get("num_preemptions"), ext.get("cached_tokens")
    return SimTiming(
        worker=str(ext["worker"]) if ext.get("worker") is not None else None,
        arrival=_r(arrival) if arrival is not None else None,
        ttft=_r(first - arrival) if first is not None and arrival is not None else None,
        e2e=_r(finish - arrival) if finish is not None and arrival is not None else None,
        queue=_r(scheduled - arrival) if scheduled is not None and arrival is not None else None,
        itl=[_r(b - a) for a, b in pairwise(times)],
        preemptions=int(preemptions) if isinstance(preemptions, int) else None,
        cached_tokens=int(cached) if isinstance(cached, int) else None,
        time_scale=num("time_scale"),
    )


def request_identity(request: Request) -> dict[str, Any]:
    """The record fields that say which planned request it is (phase, index, role, group,
    conversation and turn), for every path that records one."""
    return {
        "phase": request.phase,
        "index": request.index,
        "role": request.role,
        "group": request.group,
        "conversation": None if request.chat is None else request.chat.conversation,
        "turn": None if request.chat is None else request.chat.turn,
    }


def to_record(attempt: Attempt, origin: float) -> RequestRecord:
    """Raw timestamps -> durations; token counts from usage, else from the chunks seen."""
    request, times = attempt.request, attempt.token_times
    usage = attempt.usage or {}
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    output = usage.get("completion_tokens")
    return RequestRecord(
        **request_identity(request),
        endpoint=attempt.endpoint,
        due=_r(attempt.due - origin),
        start=_r(attempt.start - origin),
        end=_r(attempt.end - origin),
        ttft=_r(times[0] - attempt.start) if times else None,
        e2e=_r(attempt.end - attempt.start) if attempt.error_kind is None else None,
        itl=[_r(b - a) for a, b in pairwise(times)],
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=output if isinstance(output, int) else len(times),
        cached_tokens=cached if isinstance(cached, int) else None,
        worker_id=attempt.worker_id,
        status=attempt.status,
        error_kind=attempt.error_kind,
        error=attempt.error,
        sim=sim_timing(attempt.ext) if attempt.ext is not None else None,
    )
