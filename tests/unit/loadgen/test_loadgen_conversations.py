"""Conversations: the planned user side is a pure function of its inputs; the driver resends
what the server answered, keeps turns in order, abandons (never drops) what follows a failed
turn, and holds at most `cap` conversations in progress."""

import asyncio
import itertools

import pytest

from kvbench.api.load import Warmup
from kvbench.api.status import Point
from kvbench.api.workload import Workload
from kvbench.loadgen.client import Attempt
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.conversations import drive_conversations
from kvbench.loadgen.workload import Request, build_sequence

SPACE = TokenSpace()


def _workload(**kw) -> Workload:
    conversation = {"conversations": 5, "turns": 3, "userTokens": 12, "assistantTokens": 4}
    return Workload.model_validate({"promptFormat": "text", "conversation": conversation | kw})


def test_the_user_side_is_planned_from_the_seed() -> None:
    workload = _workload(systemPromptTokens=20)
    point = Point(concurrency=2)
    seq = build_sequence(workload, point, 3, Warmup(requests=2), SPACE)
    assert [(r.chat.conversation, r.chat.turn) for r in seq.measured if r.chat] == [
        (c, t) for c in range(5) for t in (1, 2, 3)
    ]
    assert [r.index for r in seq.measured] == list(range(15))
    assert {r.group for r in seq.measured} == set(range(5))  # affinity keys a conversation
    systems = {r.chat.system for r in (*seq.warmup, *seq.measured) if r.chat}
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 20
    assert len({r.prompt for r in seq.measured}) == 15  # every turn's text its own
    assert [r.group for r in seq.warmup] == [None, None]
    again = build_sequence(workload, point, 3, Warmup(requests=2), SPACE)
    assert again.digest == seq.digest
    assert build_sequence(workload, point, 4, Warmup(requests=2), SPACE).digest != seq.digest
    fewer_turns = build_sequence(
        _workload(turns=2, systemPromptTokens=20), point, 3, Warmup(), SPACE
    )
    assert fewer_turns.measured[0].prompt == seq.measured[0].prompt  # same first turns


class _Server:
    """Answers each turn with text naming the turn, fails where told, and records what it
    was sent and how many conversations were in progress."""

    def __init__(self, fail: set[tuple[int, int]] = frozenset()) -> None:
        self.fail, self.sent, self.active, self.most = fail, [], set(), 0
        self.skipped: list[tuple[Request, str]] = []

    async def send(self, request: Request, due: float, history: list[dict[str, str]]) -> Attempt:
        chat = request.chat
        assert chat is not None
        self.active.add(chat.conversation)
        self.most = max(self.most, len(self.active))
        self.sent.append((chat.conversation, chat.turn, [dict(m) for m in history]))
        await asyncio.sleep(0.001)
        attempt = Attempt(request, "pod", due)
        if (chat.conversation, chat.turn) in self.fail:
            attempt.fail("http", "HTTP 500")
        else:
            attempt.text = [f"answer {chat.conversation}.", f"{chat.turn}"]
        if chat.turn == 3 or attempt.error_kind:
            self.active.discard(chat.conversation)
        return attempt

    def skip(self, request: Request, why: str) -> None:
        self.skipped.append((request, why))


def _measured() -> list[Request]:
    return build_sequence(
        _workload(systemPromptTokens=3), Point(concurrency=2), 1, Warmup(), SPACE
    ).measured


def test_each_turn_resends_the_conversation_with_the_answers_it_got() -> None:
    requests, server = _measured(), _Server()
    asyncio.run(drive_conversations(requests, 2, 0.0, server.send, server.skip))
    assert len(server.sent) == 15 and not server.skipped
    by_turn = {(c, t): history for c, t, history in server.sent}
    system = requests[0].chat.system
    third = by_turn[(4, 3)]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant"]
    assert third[0]["content"] == system
    assert third[1]["content"] == requests[12].prompt and third[3]["content"] == requests[13].prompt
    assert third[2]["content"] == "answer 4.1" and third[4]["content"] == "answer 4.2"
    turns = [t for c, t, _ in server.sent if c == 2]
    assert turns == [1, 2, 3]
    assert server.most == 2  # two users: at most two conversations in progress


def test_turns_after_a_failed_one_are_abandoned_not_dropped() -> None:
    requests, server = _measured(), _Server(fail={(1, 1), (3, 2)})
    asyncio.run(drive_conversations(requests, 2, 0.0, server.send, server.skip))
    sent = {(c, t) for c, t, _ in server.sent}
    skipped = {(r.chat.conversation, r.chat.turn) for r, _ in server.skipped}
    assert skipped == {(1, 2), (1, 3), (3, 3)}
    assert not sent & skipped and len(sent | skipped) == 15
    assert all("turn" in why and "failed" in why for _, why in server.skipped)


def test_users_think_between_an_answer_and_the_next_turn() -> None:
    requests, server = _measured()[:3], _Server()  # one conversation of three turns
    loop_time = []

    async def timed(request, due, history):
        loop_time.append(asyncio.get_running_loop().time())
        return await server.send(request, due, history)

    asyncio.run(drive_conversations(requests, 1, 0.05, timed, server.skip))
    gaps = [b - a for a, b in itertools.pairwise(loop_time)]
    assert all(gap >= 0.05 for gap in gaps), gaps
    assert loop_time[-1] - loop_time[0] == pytest.approx(0.1 + 0.002, abs=0.05)
