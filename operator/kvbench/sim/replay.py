"""Virtual-time clients for the engine core, without HTTP.

Tests, the calibration script and dry-run planning use these to reproduce a
benchmark exactly: a closed loop of ``concurrency`` clients that each send their next
request the moment the previous one finishes (plus ``think_time``), or an open loop
with given arrival times. Everything runs on the engine's virtual clock, so the result
is the same on any machine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvbench.loadgen.summary import percentile
from kvbench.sim.engine import EngineCore
from kvbench.sim.request import SimRequest

__all__ = ["ReplaySummary", "run_closed_loop", "run_open_loop", "summarize_replay"]


@dataclass(frozen=True)
class ReplaySummary:
    """What a benchmark client would report, in virtual seconds."""

    num_requests: int
    duration: float
    output_throughput: float
    request_throughput: float
    median_ttft: float
    p95_ttft: float
    p99_ttft: float
    median_itl: float
    p99_itl: float
    max_itl: float
    num_preemptions: int


def _request(index: int, prompt: Sequence[int], max_tokens: int) -> SimRequest:
    return SimRequest(
        f"req-{index}",
        list(prompt),
        max_tokens,
        arrival_time=0.0,
        salt=index,
    )


def _stamp(core: EngineCore, request: SimRequest, arrival: float) -> None:
    request.arrival_time = arrival
    request.engine_arrival_time = arrival + core.cost.frontend_latency(request.num_prompt_tokens)
    core.add_request(request)


def run_closed_loop(
    core: EngineCore,
    prompts: Iterable[Sequence[int]],
    *,
    concurrency: int,
    max_tokens: int,
    think_time: float = 0.0,
) -> list[SimRequest]:
    """Send every prompt through ``concurrency`` clients; returns finished requests in order."""
    pending = deque(enumerate(prompts))
    done: list[SimRequest] = []
    start = core.clock
    for _ in range(min(concurrency, len(pending))):
        index, prompt = pending.popleft()
        _stamp(core, _request(index, prompt, max_tokens), start)
    while True:
        result = core.step()
        if result is None:
            break
        for request in result.finished:
            done.append(request)
            if pending:
                index, prompt = pending.popleft()
                _stamp(core, _request(index, prompt, max_tokens), result.end + think_time)
    return done


def run_routed_closed_loop(
    cores: Sequence[EngineCore],
    prompts: Iterable[Sequence[int]],
    *,
    route: Callable[[], int],
    concurrency: int,
    max_tokens: int,
    start: float = 0.0,
    label: str = "req",
) -> tuple[list[tuple[SimRequest, int]], float]:
    """A closed loop in front of several engines (a Service, a router): each request goes to
    ``cores[route()]``, in sending order, all on one virtual timeline. Returns every request
    with the index of its engine, in sending order, and when the last one finished."""
    pending = deque(enumerate(prompts))
    sent: list[tuple[SimRequest, int]] = []
    end = start

    def send(now: float) -> None:
        index, prompt = pending.popleft()
        target = route()
        request = SimRequest(
            f"{label}-{index}", list(prompt), max_tokens, arrival_time=now, salt=index
        )
        sent.append((request, target))
        _stamp(cores[target], request, now)

    for _ in range(min(concurrency, len(pending))):
        send(start)
    while True:
        ready = [(c.clock if c.busy else c.next_arrival_time(), i) for i, c in enumerate(cores)]
        due = [(t, i) for t, i in ready if t is not None]
        if not due:
            break
        result = cores[min(due)[1]].step()
        if result is None:
            continue
        for _ in result.finished:
            end = max(end, result.end)
            if pending:
                send(result.end)
    return sent, end


def run_open_loop(
    core: EngineCore,
    arrivals: Iterable[tuple[float, Sequence[int]]],
    *,
    max_tokens: int,
) -> list[SimRequest]:
    """Send each prompt at its arrival time; returns the requests in submission order."""
    requests = []
    for index, (arrival, prompt) in enumerate(arrivals):
        request = _request(index, prompt, max_tokens)
        _stamp(core, request, arrival)
        requests.append(request)
    while core.step() is not None:
        pass
    return requests


def _percentile(values: list[float], q: float) -> float:
    """The load generator's percentile (linear interpolation), so a replayed p99 means what a
    measured one does; 0 for no values (every request produced one token: no gaps)."""
    return percentile(sorted(values), q) if values else 0.0


def summarize_replay(requests: list[SimRequest]) -> ReplaySummary:
    """Throughput and latency figures of finished requests, like a load generator's (the same
    percentile definition as `kvbench.loadgen.summary`)."""
    finished = [r for r in requests if r.finish_time is not None and r.token_times]
    start = min(r.arrival_time for r in finished)
    end = max(r.finish_time for r in finished)  # type: ignore[type-var]
    ttfts = [r.token_times[0] - r.arrival_time for r in finished]
    itls = [b - a for r in finished for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    tokens = sum(r.num_output_tokens for r in finished)
    duration = end - start  # type: ignore[operator]
    return ReplaySummary(
        num_requests=len(finished),
        duration=duration,
        output_throughput=tokens / duration,
        request_throughput=len(finished) / duration,
        median_ttft=_percentile(ttfts, 50),
        p95_ttft=_percentile(ttfts, 95),
        p99_ttft=_percentile(ttfts, 99),
        median_itl=_percentile(itls, 50),
        p99_itl=_percentile(itls, 99),
        max_itl=max(itls, default=0.0),
        num_preemptions=sum(r.num_preemptions for r in finished),
    )
