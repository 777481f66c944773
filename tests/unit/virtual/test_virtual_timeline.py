"""The discrete-event timeline and the virtual clients: the same engine decisions as the engine
driven alone, responses delivered in the order of simulated time, and the load generator's
pacing (closed loop, an open loop's cap, conversations) on the virtual clock."""

import random

import pytest

from kvbench.loadgen.arrivals import Schedule
from kvbench.loadgen.workload import ChatTurn, Request
from kvbench.sim.config import SimConfig
from kvbench.sim.engine import EngineCore
from kvbench.sim.factory import build_engine
from kvbench.sim.replay import run_closed_loop
from kvbench.sim.request import SimRequest
from kvbench.virtual.clients import drive, drive_conversations
from kvbench.virtual.timeline import Timeline


def _core(**flags: int) -> EngineCore:
    config = SimConfig(
        **flags,
        model="Qwen/Qwen3-0.6B",
        max_model_len=4096,
        kv_cache_memory_bytes=1 << 30,
        gpu_memory_utilization=0.01,
        profile="qwen3-0.6b-24gb",
    )
    return build_engine(config).core


def _requests(n: int, length: int, max_tokens: int = 16) -> list[Request]:
    rng = random.Random(n)
    return [
        Request("measured", i, tuple(rng.randrange(1000, 100000) for _ in range(length)),
                length, max_tokens)
        for i in range(n)
    ]  # fmt: skip


def _sender(timeline: Timeline, cores: list[EngineCore], sent: dict[int, SimRequest]):
    """Sends request i to cores[i % len(cores)], stamped as the server stamps it."""

    def send(request, due, chat, done):
        core = cores[request.index % len(cores)]
        sim = SimRequest(f"r{request.index}", list(request.prompt), request.max_tokens,
                         arrival_time=timeline.now, salt=request.index)  # fmt: skip
        sim.engine_arrival_time = timeline.now + core.cost.frontend_latency(len(request.prompt))
        sim.notify = lambda r: done(r.finish_time, "")
        sent[request.index] = sim
        core.add_request(sim)

    return send


def test_one_engine_in_the_timeline_decides_as_the_engine_alone() -> None:
    """Catches a timeline that steps an engine before an earlier event (a send it had to see)
    or that paces the closed loop other than send-on-finish."""
    requests = _requests(24, 700)
    alone = run_closed_loop(
        _core(), [list(r.prompt) for r in requests], concurrency=4, max_tokens=16
    )
    core = _core()
    timeline, sent = Timeline([core], 0.0), {}
    drive(timeline, requests, Schedule("closed", cap=4), _sender(timeline, [core], sent))
    for expected in alone:
        index = int(expected.request_id.split("-")[1])
        assert sent[index].token_times == pytest.approx(expected.token_times, abs=1e-12)


def test_responses_reach_clients_in_simulated_time_order() -> None:
    """A long prefill on one engine (one step: the token budget holds it) is computed first
    but ends after a short one that starts later on the other: its client must hear second.
    Catches responses delivered when their step was computed (a Service would then draw its
    choices out of time order)."""
    cores = [_core(max_num_batched_tokens=8192), _core(max_num_batched_tokens=8192)]
    timeline, sent, heard = Timeline(cores, 0.0), {}, []
    send = _sender(timeline, cores, sent)
    long, short = _requests(1, 4000, 1)[0], _requests(2, 16, 1)[1]

    def record(name):
        return lambda now, _text: heard.append((name, now))

    timeline.at(0.0, lambda _t: send(long, 0.0, None, record("long")))
    timeline.at(0.012, lambda _t: send(short, 0.012, None, record("short")))
    timeline.run()
    assert [name for name, _ in heard] == ["short", "long"]
    assert heard[0][1] < heard[1][1]
    assert sent[1].first_scheduled_time > sent[0].first_scheduled_time  # computed second


def test_an_open_loop_holds_requests_past_its_cap() -> None:
    """Three requests due at once with one allowed in flight: each goes out when the previous
    ends, still due at 0. Catches a cap that drops, reorders or forgets held requests."""
    core = _core()
    timeline, sent, starts = Timeline([core], 0.0), {}, {}
    inner = _sender(timeline, [core], sent)

    def send(request, due, chat, done):
        starts[request.index] = (due, timeline.now)
        inner(request, due, chat, done)

    drive(timeline, _requests(3, 64), Schedule("scheduled", cap=1, offsets=(0.0, 0.0, 0.0)), send)
    assert [starts[i][0] for i in range(3)] == [0.0, 0.0, 0.0]
    assert starts[1][1] == sent[0].finish_time
    assert starts[2][1] == sent[1].finish_time


def test_conversations_resend_answers_after_thinking_and_abandon_after_a_failure() -> None:
    """Catches a turn sent without the answers before it, before the think time, or a
    conversation carried on after a failed turn (there is no answer to resend)."""
    timeline = Timeline([], 0.0)
    turns = [
        Request("measured", c * 2 + t, f"user {c}.{t}", 4, 4, chat=ChatTurn(c, t + 1, "sys"))
        for c in range(2) for t in range(2)
    ]  # fmt: skip
    sent, skipped = [], []

    def send(request, due, chat, done):
        sent.append((request.index, timeline.now, chat))
        failed = request.index == 2  # the second conversation's first turn
        answer = None if failed else f"answer {request.index}"
        timeline.at(timeline.now + 1.0, lambda t: done(t, answer))

    def skip(request, now, why):
        skipped.append((request.index, why))

    drive_conversations(timeline, turns, 1, 5.0, send, skip)
    assert sent[0] == (0, 0.0, [("system", "sys"), ("user", "user 0.0")])
    assert sent[1] == (
        1,
        6.0,  # answered at 1 s, then 5 s of thinking
        [("system", "sys"), ("user", "user 0.0"), ("assistant", "answer 0"), ("user", "user 0.1")],
    )
    assert [index for index, _, _ in sent] == [0, 1, 2]  # the next conversation, at once
    assert sent[2][1] == 7.0
    assert skipped == [(3, "turn 1 of its conversation failed")]
