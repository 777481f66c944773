"""A real tokenizer for the simulator: a ``tokenizer.json`` loaded with the ``tokenizers`` library.

vLLM tokenizes with the model's tokenizer; the simulator's stand-in only preserves shared
prefixes. ``--tokenizer PATH`` gives the simulator the same token ids a vLLM serving that
tokenizer would compute (special tokens added as the tokenizer's post-processor says, as
vLLM's completions and ``/tokenize`` do by default), so token counts, block contents and
KV events match. Chat messages are still rendered with ChatML (the simulator does not run
Jinja chat templates). ``tokenizers`` is imported only when this module is.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from kvbench.sim.tokenizer import render_chatml

__all__ = ["FileTokenizer"]


class FileTokenizer:
    """Text <-> token ids through one ``tokenizer.json``."""

    def __init__(self, path: str | Path) -> None:
        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ValueError(f"no tokenizer.json at {path}")
        self.path = file
        self._tokenizer = HFTokenizer.from_file(str(file))
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        self.answer_ids: tuple[int, ...] | None = None  # any id: no text round trip known

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode_one(self, token_id: int) -> str:
        return self._tokenizer.decode([token_id], skip_special_tokens=True)

    def decode(self, token_ids: Iterable[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def render_chat(
        self, messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True
    ) -> str:
        return render_chatml(messages, add_generation_prompt)
