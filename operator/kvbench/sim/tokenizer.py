"""A stand-in tokenizer: deterministic, prefix-stable and cheap.

There are no tokenizer files here, so text is cut into pieces of up to four
non-space characters, each with its leading space (roughly the 4 characters per
token of real BPE tokenizers on English), and each piece maps to a stable id. Two
prompts that share a text prefix share the token prefix, which is what prefix
caching needs. Chat messages are rendered with a ChatML template first. Generated
tokens are short words whose text encodes back to the very ids generated, as a real
model's answer does under its own tokenizer: a chat client that resends an answer
meets the KV its generation left in the cache.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from typing import Protocol

__all__ = ["SimTokenizer", "Tokenizer", "load_tokenizer", "render_chatml"]

_PIECE = re.compile(r"\s?[^\s]{1,4}|\s")
_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "at",
    "from",
    "an",
    "which",
    "model",
    "cache",
    "token",
    "block",
    "prefix",
    "request",
    "server",
    "engine",
    "batch",
    "queue",
    "memory",
    "time",
    "step",
    "first",
    "next",
    "value",
    "data",
    "result",
    "point",
    "state",
    "layer",
    "head",
    "chunk",
    "prompt",
    "output",
    "input",
    "rate",
)
_RESERVED = 1000


class Tokenizer(Protocol):
    """What the server needs of a tokenizer."""

    vocab_size: int
    answer_ids: tuple[int, ...] | None
    """Ids generated tokens are drawn from so that decode then encode gives them back; None
    where no such set is known (any id may be generated)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode_one(self, token_id: int) -> str: ...

    def decode(self, token_ids: Iterable[int]) -> str: ...

    def render_chat(
        self, messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True
    ) -> str: ...


def render_chatml(messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    """ChatML prompt text, with the assistant header when asked (Qwen's template)."""
    parts = [f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def load_tokenizer(path: str | None, vocab_size: int) -> Tokenizer:
    """The ``tokenizer.json`` at ``path`` (a file or a directory holding one), else the
    stand-in tokenizer over ``vocab_size`` ids. ``tokenizers`` is imported only here: it is
    not a dependency of kvbench's core."""
    if path is None:
        return SimTokenizer(vocab_size)
    from kvbench.sim.file_tokenizer import FileTokenizer

    return FileTokenizer(path)


class SimTokenizer:
    """Text <-> token ids for one vocabulary size."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        # ids below _RESERVED stay for special tokens, unless the vocabulary is too small to
        # leave any (a test model's 1,000 ids): then text uses all of it
        self._base = _RESERVED if vocab_size > 2 * _RESERVED else 0
        self._span = vocab_size - self._base
        self._memo: dict[str, int] = {}
        # one piece each (at most four letters), so the text of an answer encodes back to it
        self._words = [" " + w for w in _WORDS if len(w) <= 4]
        self.answer_ids = tuple(self.encode(w)[0] for w in self._words)
        self._word_of = dict(zip(self.answer_ids, self._words, strict=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (there are no special tokens to add)."""
        memo, span, base = self._memo, self._span, self._base
        ids = []
        for piece in _PIECE.findall(text):
            tid = memo.get(piece)
            if tid is None:
                tid = base + zlib.crc32(piece.encode()) % span
                if len(memo) < 1_000_000:
                    memo[piece] = tid
            ids.append(tid)
        return ids

    def decode_one(self, token_id: int) -> str:
        """Text of one generated token (an id outside the answer set: a word all the same)."""
        return self._word_of.get(token_id) or self._words[token_id % len(self._words)]

    def decode(self, token_ids: Iterable[int]) -> str:
        return "".join(self.decode_one(t) for t in token_ids)

    def render_chat(
        self, messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True
    ) -> str:
        return render_chatml(messages, add_generation_prompt)
