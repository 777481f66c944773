"""Seeded workloads: (workload, point, seed, warm-up, token space, trace) -> the request
sequence."""

from kvbench.api.load import Warmup
from kvbench.api.status import Point
from kvbench.api.workload import Workload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.conversation import conversation_sequence
from kvbench.loadgen.workload.interference import interference_sequence
from kvbench.loadgen.workload.mooncake import Trace
from kvbench.loadgen.workload.random import random_sequence
from kvbench.loadgen.workload.request import ChatTurn, Phase, Request, Sequence
from kvbench.loadgen.workload.shared_prefix import shared_prefix_sequence
from kvbench.loadgen.workload.trace import trace_sequence

__all__ = ["ChatTurn", "Phase", "Request", "Sequence", "build_sequence"]


def build_sequence(
    workload: Workload,
    point: Point,
    seed: int,
    warmup: Warmup,
    space: TokenSpace,
    trace: Trace | None = None,
) -> Sequence:
    """The run's requests; nothing but these arguments decides them (not the routing arm).
    A trace workload's rows are `trace` (`trace_source.replayed_trace`)."""
    text = workload.prompt_format == "text"
    if workload.trace is not None:
        if trace is None:
            raise ValueError("a trace workload needs its trace")
        return trace_sequence(workload.trace, trace, seed, warmup.requests, space, text)
    if workload.shared_prefix is not None:
        if point.prefixes is None:
            raise ValueError("a sharedPrefix workload needs point.prefixes")
        return shared_prefix_sequence(
            workload.shared_prefix, point.prefixes, seed, warmup, space, text
        )
    if workload.random is not None:
        return random_sequence(
            workload.random, point.concurrency, seed, warmup.requests, space, text
        )
    if workload.conversation is not None:
        return conversation_sequence(workload.conversation, seed, warmup.requests, space)
    assert workload.interference is not None
    return interference_sequence(workload.interference, seed, warmup.requests, space, text)
