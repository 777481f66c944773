"""Fast JSON for responses and SSE chunks, byte-compatible with vLLM's layout.

A streamed chunk is a fixed prefix, the escaped token text and a fixed suffix, so a
token costs one string escape and a concatenation instead of a model dump. Chunks that
carry more than the text (``logprobs``, ``stream_options.continuous_usage_stats``) are
encoded whole. The ``kvbench`` timings object goes on the non-streaming body and on the
final streamed chunk (the usage chunk when ``stream_options.include_usage``, else the last
content chunk). The shapes are pinned by ``kvbench.sim.api_models`` and its tests.

Logprobs follow vLLM's shapes (``CompletionLogProbs``, ``ChatCompletionLogProbs``) for the
simulator's sampler, which is deterministic: the sampled token has probability 1, so its
logprob is 0.0, and the other top entries, distinct tokens the model gives probability 0,
carry -9999.0, the value vLLM writes for minus infinity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from kvbench.sim.request import SimRequest

__all__ = ["DONE", "LogprobEncoder", "ResponseWriter", "error_body", "error_event"]

_encode = msgspec.json.Encoder().encode
DONE = b"data: [DONE]\n\n"
_NEG_INF = -9999.0


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    """vLLM's error JSON."""
    return _encode({"error": {"message": message, "type": err_type, "param": param, "code": code}})


def error_event(body: bytes) -> bytes:
    """An error inside a stream: vLLM's streaming error response, then ``[DONE]``."""
    return b"data: " + body + b"\n\n" + DONE


class LogprobEncoder:
    """vLLM's logprobs objects for ``top`` requested entries (``logprobs`` of a completion,
    ``top_logprobs`` of a chat request)."""

    __slots__ = ("_decode", "_vocab", "top")

    def __init__(self, top: int, decode: Callable[[int], str], vocab_size: int) -> None:
        self.top = top
        self._decode = decode
        self._vocab = vocab_size

    def _entries(self, token_id: int, text: str, count: int) -> list[tuple[str, float]]:
        """The sampled token, then distinct other tokens, ``count`` in all (at least one)."""
        entries, seen = [(text, 0.0)], {text}
        step = 1
        while len(entries) < count and step < self._vocab:
            other = self._decode((token_id + step) % self._vocab)
            step += 1
            if other not in seen:
                seen.add(other)
                entries.append((other, _NEG_INF))
        return entries

    def completion(self, ids: list[int], texts: list[str], offset: int) -> dict[str, Any]:
        """``CompletionLogProbs``: vLLM keeps the sampled token and the top entries."""
        offsets, tops = [], []
        for token_id, text in zip(ids, texts, strict=True):
            offsets.append(offset)
            offset += len(text)
            tops.append(dict(self._entries(token_id, text, max(self.top, 1))))
        return {
            "text_offset": offsets,
            "token_logprobs": [0.0] * len(ids),
            "tokens": texts,
            "top_logprobs": tops,
        }

    def chat(self, ids: list[int], texts: list[str]) -> dict[str, Any]:
        """``ChatCompletionLogProbs``: the first ``top`` entries of each position."""
        content = []
        for token_id, text in zip(ids, texts, strict=True):
            top = self._entries(token_id, text, self.top)[: self.top]
            content.append(
                {
                    "token": text, "logprob": 0.0, "bytes": list(text.encode(errors="replace")),
                    "top_logprobs": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode(errors="replace"))}
                        for t, lp in top
                    ],
                }
            )  # fmt: skip
        return {"content": content}


class ResponseWriter:
    """Encodes one request's response, for ``completion`` or ``chat``; a streamed response
    keeps the count and text length of the tokens written so far."""

    __slots__ = (
        "_chunk_prefix",
        "_chunk_suffix",
        "_head",
        "_sent",
        "_text_len",
        "chat",
        "continuous_usage",
        "include_details",
        "logprobs",
        "model",
        "prompt_tokens",
        "request_id",
        "time_scale",
        "worker",
    )

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        model: str,
        worker: str,
        time_scale: float,
        include_details: bool,
        prompt_tokens: int = 0,
        logprobs: LogprobEncoder | None = None,
        continuous_usage: bool = False,
    ) -> None:
        self.chat = chat
        self.request_id = request_id
        self.model = model
        self.worker = worker
        self.time_scale = time_scale
        self.include_details = include_details
        self.prompt_tokens = prompt_tokens
        self.logprobs = logprobs
        self.continuous_usage = continuous_usage
        self._sent = 0
        self._text_len = 0
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = (
            b'{"id":' + _encode(request_id) + b',"object":"' + obj.encode() + b'","created":'
            + str(created).encode() + b',"model":' + _encode(model)
        )  # fmt: skip
        if chat:
            self._chunk_prefix = (
                b"data: " + self._head + b',"choices":[{"index":0,"delta":{"content":'
            )
            self._chunk_suffix = b'},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        else:
            self._chunk_prefix = b"data: " + self._head + b',"choices":[{"index":0,"text":'
            self._chunk_suffix = (
                b',"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
            )

    def timings(self, request: SimRequest) -> dict[str, Any]:
        """The ``kvbench`` extension object."""
        return {
            "worker": self.worker,
            "arrival_time": request.arrival_time,
            "first_scheduled_time": request.first_scheduled_time,
            "first_token_time": request.first_token_time,
            "token_times": request.token_times,
            "finish_time": request.finish_time,
            "num_preemptions": request.num_preemptions,
            "cached_tokens": max(request.num_cached_tokens, 0),
            "time_scale": self.time_scale,
        }

    def usage(self, request: SimRequest) -> dict[str, Any]:
        prompt, completion = request.num_prompt_tokens, request.num_output_tokens
        details = (
            {"cached_tokens": max(request.num_cached_tokens, 0)} if self.include_details else None
        )
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": details,
        }

    def _running_usage(self) -> dict[str, Any]:
        """A chunk's usage under ``continuous_usage_stats`` (vLLM sets only these fields)."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self._sent,
            "completion_tokens": self._sent,
        }
        if self.chat:
            usage["completion_tokens_details"] = None
        return usage

    def _logprobs(self, ids: list[int], texts: list[str]) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        if self.chat:
            return self.logprobs.chat(ids, texts)
        return self.logprobs.completion(ids, texts, self._text_len)

    def body(self, request: SimRequest, text: str, ids: list[int], texts: list[str]) -> bytes:
        """The non-streaming response; ``ids`` and ``texts`` are the output tokens one by
        one (for logprobs)."""
        reason = request.finish_reason.value if request.finish_reason else None
        logprobs = self._logprobs(ids, texts)
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": logprobs,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        return _encode(
            {
                "id": self.request_id,
                "object": obj,
                "created": int(time.time()),
                "model": self.model,
                "choices": [choice],
                "usage": self.usage(request),
                "kvbench": self.timings(request),
            }
        )

    def role_chunk(self) -> bytes:
        """The first chat chunk, announcing the assistant role."""
        if self.continuous_usage:
            choice = {
                "index": 0, "delta": {"role": "assistant", "content": ""},
                "logprobs": None, "finish_reason": None,
            }  # fmt: skip
            return self._chunk({"choices": [choice], "usage": self._running_usage()})
        return (
            b"data: " + self._head
            + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        )  # fmt: skip

    def content_chunks(self, ids: list[int], texts: list[str]) -> list[bytes]:
        """One chunk per token that does not finish the request."""
        if self.logprobs is None and not self.continuous_usage:
            self._sent += len(ids)
            prefix, suffix = self._chunk_prefix, self._chunk_suffix
            return [prefix + _encode(text) + suffix for text in texts]
        chunks = []
        for token_id, text in zip(ids, texts, strict=True):
            chunks.append(self._detailed_chunk([token_id], text, None))
        return chunks

    def last_chunk(
        self, request: SimRequest, ids: list[int], text: str, with_timings: bool
    ) -> bytes:
        """The chunk carrying ``finish_reason`` (and the timings without a usage chunk);
        ``ids`` is the last token, or nothing when the request ended without one."""
        reason = request.finish_reason.value if request.finish_reason else None
        timings = self.timings(request) if with_timings else None
        return self._detailed_chunk(ids, text, reason, timings)

    def _detailed_chunk(
        self,
        ids: list[int],
        text: str,
        reason: str | None,
        timings: dict[str, Any] | None = None,
    ) -> bytes:
        logprobs = self._logprobs(ids, [text] if ids else [])
        self._sent += len(ids)
        self._text_len += len(text)
        choice: dict[str, Any]
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": logprobs,
                      "finish_reason": reason}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason,
                      "stop_reason": None}  # fmt: skip
        tail: dict[str, Any] = {
            "choices": [choice],
            "usage": self._running_usage() if self.continuous_usage else None,
        }
        if timings is not None:
            tail["kvbench"] = timings
        return self._chunk(tail)

    def _chunk(self, tail: dict[str, Any]) -> bytes:
        return b"data: " + self._head + b"," + _encode(tail)[1:] + b"\n\n"

    def usage_chunk(self, request: SimRequest) -> bytes:
        """The final chunk of ``include_usage`` streams: no choices, usage and timings."""
        tail = {"choices": [], "usage": self.usage(request), "kvbench": self.timings(request)}
        return self._chunk(tail)
