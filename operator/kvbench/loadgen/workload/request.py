"""A planned request and a run's request sequence, with the digest every result records."""

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

__all__ = ["ChatTurn", "Phase", "Request", "Sequence"]

Phase = Literal["warmup", "measured"]


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """Where a request sits in a conversation; its messages are made when it is sent, from
    the answers the earlier turns got."""

    conversation: int
    turn: int  # from 1
    system: str | None = None  # the system prompt, on every turn of the conversation


@dataclass(frozen=True, slots=True)
class Request:
    """One request to send. `prompt` is token ids or text, as the workload's format says;
    in a conversation it is the turn's new user text."""

    phase: Phase
    index: int
    prompt: tuple[int, ...] | str
    prompt_tokens: int  # intended length in tokens (a text prompt's is approximate)
    max_tokens: int
    group: int | None = None
    role: Literal["request", "stream", "inject"] = "request"
    offset: float | None = None
    chat: ChatTurn | None = None

    @property
    def routing_key(self) -> str:
        """What affinity hashes: the prefix group or conversation, else the request itself."""
        if self.group is not None:
            return f"group-{self.group}"
        return f"{self.phase}-{self.index}"

    def canonical(self) -> bytes:
        """The bytes the digest covers: everything that decides what the server sees."""
        prompt = self.prompt if isinstance(self.prompt, str) else list(self.prompt)
        row = [self.phase, self.index, self.group, self.role, self.offset, self.max_tokens, prompt]
        if self.chat is not None:
            row += [self.chat.conversation, self.chat.turn, self.chat.system]
        return json.dumps(row, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Sequence:
    """Warm-up requests (never measured) then measured requests, in sending order; `groups`
    counts the prefix groups their `group`s number (what prefix affinity places), if any."""

    warmup: list[Request]
    measured: list[Request]
    groups: int | None = None

    @cached_property
    def digest(self) -> str:
        """sha256 over every request in order: equal digests mean identical traffic."""
        h = hashlib.sha256()
        for request in (*self.warmup, *self.measured):
            body = request.canonical()
            h.update(len(body).to_bytes(8, "big"))
            h.update(body)
        return "sha256:" + h.hexdigest()
