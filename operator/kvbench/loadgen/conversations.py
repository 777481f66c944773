"""Conversations in flight: `cap` of them at once, each turn sent when its previous turn has
answered and the user has thought.

A user (one of `cap` tasks) takes the next conversation, sends its turns in order, each with
the messages so far (the system prompt, every earlier user text and the answer the server
gave to it), sleeps the think time between an answer and the next turn, then takes the next
conversation. When a turn fails there is no answer to resend: the conversation's remaining
turns are recorded as `abandoned`, never sent and never dropped.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from itertools import groupby

from kvbench.loadgen.client import Attempt
from kvbench.loadgen.workload import Request

__all__ = ["ChatSend", "Skip", "drive_conversations"]

ChatSend = Callable[[Request, float, list[dict[str, str]]], Awaitable[Attempt]]
"""Sends one turn with the messages before it; the float is when it was due."""
Skip = Callable[[Request, str], None]
"""Records a turn that is never sent, and why."""


async def drive_conversations(
    requests: list[Request], cap: int, think_seconds: float, send: ChatSend, skip: Skip
) -> None:
    """Carry out every conversation in `requests` (turns in order within each)."""
    conversations = [
        list(turns)
        for _, turns in groupby(requests, key=lambda r: r.chat.conversation if r.chat else -1)
    ]
    pending = iter(conversations)

    async def user() -> None:
        for turns in pending:
            system = turns[0].chat.system if turns[0].chat else None
            history = [{"role": "system", "content": system}] if system else []
            for position, request in enumerate(turns):
                if position:
                    await asyncio.sleep(think_seconds)
                attempt = await send(request, time.perf_counter(), history)
                if attempt.error_kind is not None:
                    for later in turns[position + 1 :]:
                        skip(later, f"turn {position + 1} of its conversation failed")
                    break
                history = [
                    *history,
                    {"role": "user", "content": str(request.prompt)},
                    {"role": "assistant", "content": "".join(attempt.text or ())},
                ]

    await asyncio.gather(*(user() for _ in range(min(cap, len(conversations)))))
