"""The load generator's pacing on the virtual clock: the closed loop, an open-loop schedule
with its cap on requests in flight, and users carrying conversations.

Each driver mirrors its wall-clock twin (`loadgen.arrivals.drive`,
`loadgen.conversations.drive_conversations`) with one difference: nothing costs time on the
client side, so a closed-loop client sends its next request the instant the previous one
finished, and a schedule is never late unless its cap holds a request back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import groupby

from kvbench.loadgen.arrivals import Schedule
from kvbench.loadgen.workload import Request
from kvbench.virtual.timeline import Timeline

__all__ = ["Done", "Send", "drive", "drive_conversations"]

Done = Callable[[float, "str | None"], None]
"""Called when a request has ended: (virtual time, the answer's text, None if it failed)."""
Send = Callable[[Request, float, list[tuple[str, str]] | None, Done], None]
"""Sends a request at the timeline's now: (request, when it was due, chat messages, done)."""
Skip = Callable[[Request, float, str], None]
"""Records a turn never sent: (request, virtual time, why)."""


def drive(timeline: Timeline, requests: list[Request], schedule: Schedule, send: Send) -> None:
    """Send every request as `schedule` says and run the timeline until all have ended."""
    if schedule.offsets is None:
        _closed_loop(timeline, requests, schedule.cap, send)
    else:
        _open_loop(timeline, requests, schedule.offsets, schedule.cap, send)
    timeline.run()


def _closed_loop(timeline: Timeline, requests: list[Request], cap: int, send: Send) -> None:
    pending = iter(requests)

    def next_request(now: float, _text: str | None = None) -> None:
        request = next(pending, None)
        if request is not None:
            send(request, now, None, next_request)

    for _ in range(min(cap, len(requests))):
        timeline.at(timeline.now, next_request)


def _open_loop(
    timeline: Timeline, requests: list[Request], offsets: tuple[float, ...], cap: int, send: Send
) -> None:
    """Each request is due at the phase start plus its offset; one that finds `cap` in flight
    waits for the next to end (sent late, its due time kept)."""
    start, in_flight = timeline.now, [0]
    held: deque[tuple[Request, float]] = deque()

    def ended(now: float, _text: str | None) -> None:
        in_flight[0] -= 1
        if held:
            request, due = held.popleft()
            in_flight[0] += 1
            send(request, due, None, ended)

    def due(request: Request) -> Callable[[float], None]:
        def arrive(now: float) -> None:
            if in_flight[0] >= cap or held:
                held.append((request, now))
                return
            in_flight[0] += 1
            send(request, now, None, ended)

        return arrive

    for request, offset in zip(requests, offsets, strict=True):
        timeline.at(start + offset, due(request))


def drive_conversations(
    timeline: Timeline,
    requests: list[Request],
    cap: int,
    think_seconds: float,
    send: Send,
    skip: Skip,
) -> None:
    """`cap` users, each taking the next conversation and sending its turns in order, each
    with the messages so far and `think_seconds` after the previous answer; a failed turn
    leaves the conversation's later turns `abandoned`."""
    conversations = [
        list(turns)
        for _, turns in groupby(requests, key=lambda r: r.chat.conversation if r.chat else -1)
    ]
    pending = iter(conversations)

    def take(now: float) -> None:
        turns = next(pending, None)
        if turns is None:
            return
        system = turns[0].chat.system if turns[0].chat else None
        history = [("system", system)] if system else []
        turn(turns, 0, history, now)

    def turn(
        turns: list[Request], position: int, history: list[tuple[str, str]], now: float
    ) -> None:
        request = turns[position]

        def answered(at: float, text: str | None) -> None:
            if text is None:
                for later in turns[position + 1 :]:
                    skip(later, at, f"turn {position + 1} of its conversation failed")
                take(at)
                return
            after = [*history, ("user", str(request.prompt)), ("assistant", text)]
            if position + 1 < len(turns):
                timeline.at(at + think_seconds, lambda t: turn(turns, position + 1, after, t))
            else:
                take(at)

        send(request, now, [*history, ("user", str(request.prompt))], answered)

    for _ in range(min(cap, len(conversations))):
        timeline.at(timeline.now, take)
    timeline.run()
