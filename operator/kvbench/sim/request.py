"""One request inside the simulated engine: token bookkeeping and virtual timestamps.

Output tokens are not stored: token ``i`` of a request is a pure function of the
request's salt and ``i`` (so identical greedy requests produce identical tokens, as
greedy decoding would, and their generated blocks can share the prefix cache). This
keeps a decode step free of per-token Python objects except the timestamp list that
the response contract exposes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["FinishReason", "RequestStatus", "SimRequest", "greedy_salt", "output_token_id"]

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = 0xBF58476D1CE4E5B9


def output_token_id(salt: int, index: int, vocab_size: int) -> int:
    """Deterministic pseudo-random token id for output position ``index``."""
    x = ((salt + (index + 1) * _GOLDEN) & _MASK64) * _MIX & _MASK64
    return (x ^ (x >> 31)) % vocab_size


def greedy_salt(tokens: list[int], seed: int | None) -> int:
    """The salt of a greedy request: equal prompts (and seeds) generate equal tokens, so their
    generated blocks can share the prefix cache."""
    return hash((len(tokens), tuple(tokens[-64:]), seed or 0)) & _MASK64


class RequestStatus(enum.IntEnum):
    """Life cycle states with vLLM's names."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3


class FinishReason(enum.StrEnum):
    """vLLM's finish reasons (label values of ``vllm:request_success_total``)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


class SimRequest:
    """A request's state; times are virtual seconds on the engine clock."""

    __slots__ = (
        "answer_ids",
        "arrival_time",
        "block_hashes",
        "blocks",
        "engine_arrival_time",
        "finish_reason",
        "finish_time",
        "first_scheduled_time",
        "first_token_time",
        "max_tokens",
        "notify",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_placeholders",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "prompt_token_ids",
        "request_id",
        "salt",
        "status",
        "token_times",
        "vocab_size",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        *,
        arrival_time: float,
        engine_arrival_time: float | None = None,
        salt: int = 0,
        vocab_size: int = 151936,
        notify: Callable[[SimRequest], None] | None = None,
        answer_ids: tuple[int, ...] | None = None,
    ) -> None:
        """`answer_ids`: the ids generated tokens are drawn from, when the tokenizer has a
        set whose text encodes back to them (else any id of the vocabulary)."""
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = len(prompt_token_ids)
        self.max_tokens = max_tokens
        self.salt = salt & _MASK64
        self.vocab_size = vocab_size
        self.answer_ids = answer_ids
        self.arrival_time = arrival_time
        self.engine_arrival_time = (
            arrival_time if engine_arrival_time is None else engine_arrival_time
        )
        self.notify = notify
        self.status = RequestStatus.WAITING
        self.num_output_tokens = 0
        self.num_output_placeholders = 0
        """vLLM's: tokens sampled but not yet back at the scheduler. Under async scheduling the
        previous step's token is still in flight while the next step is decided, so that
        decision caches blocks only up to the tokens known (``num_tokens`` less these)."""
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1
        self.num_preemptions = 0
        self.blocks: list[int] = []
        self.block_hashes: list[bytes] = []
        self.num_cached_blocks = 0
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.finish_reason: FinishReason | None = None
        self.token_times: list[float] = []

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (vLLM's ``request.num_tokens``)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def output_token_ids(self, start: int = 0, end: int | None = None) -> list[int]:
        """Generated token ids ``[start, end)`` (default: all generated so far)."""
        stop = self.num_output_tokens if end is None else end
        salt, answers = self.salt, self.answer_ids
        if answers:
            n = len(answers)
            return [answers[output_token_id(salt, i, n)] for i in range(start, stop)]
        vocab = self.vocab_size
        return [output_token_id(salt, i, vocab) for i in range(start, stop)]

    def token_ids(self, start: int, end: int) -> list[int]:
        """Token ids at sequence positions ``[start, end)``, prompt then generated."""
        n = self.num_prompt_tokens
        if end <= n:
            return self.prompt_token_ids[start:end]
        head = self.prompt_token_ids[start:n] if start < n else []
        return head + self.output_token_ids(max(start - n, 0), end - n)
