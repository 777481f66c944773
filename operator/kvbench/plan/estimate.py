"""A coarse duration estimate per run, so `kvbench plan` can say roughly how long it takes.

It is a planning aid, not a prediction: per request, prefill at a fixed rate plus decode at a
fixed inter-token latency, spread over the requests in flight, plus a server start per run.
"""

from pydantic import BaseModel, Field

from kvbench.api import ExperimentSpec, Point
from kvbench.api.units import parse_duration
from kvbench.api.workload import TraceInfo

__all__ = ["DurationModel", "estimate_local_seconds", "estimate_run_seconds"]


class DurationModel(BaseModel):
    """Rates behind the estimate (defaults: article 000's Qwen3-1.7B on an 8 GB GPU)."""

    prefill_tokens_per_second: float = Field(8200.0, gt=0)
    inter_token_seconds: float = Field(0.015, gt=0)
    startup_seconds: float = Field(60.0, ge=0, description="One vLLM start, weights cached")
    slots_per_worker: int = Field(8, ge=1, description="Requests one worker serves at full speed")
    local_run_overhead_seconds: float = Field(
        3.0,
        ge=0,
        description="Per run of `kvbench run`: simulators and the load generator starting "
        "(the 6-worker article-002 grid: 36 runs in 3 min at time scale 0.05)",
    )


def _request_tokens(spec: ExperimentSpec, trace: TraceInfo | None) -> tuple[int, int]:
    """(prompt, output) tokens of a typical request (a trace's: its rows' means)."""
    w = spec.workload
    if w.trace is not None:
        assert trace is not None
        return trace.input_tokens, trace.output_tokens
    if w.shared_prefix is not None:
        return w.shared_prefix.prompt_tokens, w.shared_prefix.output_tokens
    if w.random is not None:
        return w.random.input_tokens.mean, w.random.output_tokens.mean
    if w.conversation is not None:  # the middle turn's prompt
        c = w.conversation
        turn = (c.turns + 1) // 2
        prompt = c.system_prompt_tokens + turn * c.user_tokens + (turn - 1) * c.assistant_tokens
        return prompt, c.assistant_tokens
    assert w.interference is not None
    return w.interference.prompt_tokens, w.interference.stream_output_tokens


def _load_seconds(
    spec: ExperimentSpec,
    point: Point,
    requests: int,
    model: DurationModel,
    trace: TraceInfo | None,
) -> float:
    prompt, output = _request_tokens(spec, trace)
    per_request = prompt / model.prefill_tokens_per_second + output * model.inter_token_seconds
    in_flight = min(point.concurrency, spec.total_workers * model.slots_per_worker)
    load = requests * per_request / in_flight
    if point.request_rate is not None:
        load = max(load, requests / point.request_rate)
    chats = spec.workload.conversation
    if chats is not None:  # a thinking user holds a slot idle
        thinking = chats.conversations * (chats.turns - 1) * parse_duration(chats.think_time)
        load += thinking / point.concurrency
    replay = spec.workload.trace
    if replay is not None and replay.timing == "trace" and trace is not None:
        load = max(load, trace.seconds / replay.speedup)
    return load


def estimate_run_seconds(
    spec: ExperimentSpec,
    point: Point,
    requests: int,
    model: DurationModel,
    trace: TraceInfo | None = None,
) -> float:
    """Seconds one run takes on a GPU cluster, roughly (a trace workload's from its `trace`)."""
    startup = model.startup_seconds if spec.freshness == "restart" else 0.0
    return startup + _load_seconds(spec, point, requests, model, trace)


def estimate_local_seconds(
    spec: ExperimentSpec,
    point: Point,
    requests: int,
    model: DurationModel,
    trace: TraceInfo | None = None,
) -> float:
    """Wall seconds one run takes with `kvbench run`: the load on the simulator's clock,
    compressed by the time scale, plus the processes starting."""
    load = _load_seconds(spec, point, requests, model, trace)
    return model.local_run_overhead_seconds + load * spec.simulator.time_scale
