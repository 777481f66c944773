"""Fast JSON for responses and SSE chunks, byte-compatible with vLLM's layout.

A streamed chunk is a fixed prefix, the escaped token text and a fixed suffix, so a
token costs one string escape and a concatenation instead of a model dump. The
``kvbench`` timings object goes on the non-streaming body and on the final streamed
chunk (the usage chunk when ``stream_options.include_usage``, else the last content
chunk). The shapes are pinned by ``kvbench.sim.api_models`` and its tests.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from kvbench.sim.request import SimRequest

__all__ = ["DONE", "ResponseWriter", "error_body"]

_encode = msgspec.json.Encoder().encode
DONE = b"data: [DONE]\n\n"


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    """vLLM's error JSON."""
    return _encode({"error": {"message": message, "type": err_type, "param": param, "code": code}})


class ResponseWriter:
    """Encodes one request's response, for ``completion`` or ``chat``."""

    __slots__ = (
        "_chunk_prefix",
        "_chunk_suffix",
        "_head",
        "chat",
        "include_details",
        "model",
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
    ) -> None:
        self.chat = chat
        self.request_id = request_id
        self.model = model
        self.worker = worker
        self.time_scale = time_scale
        self.include_details = include_details
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

    def body(self, request: SimRequest, text: str) -> bytes:
        """The non-streaming response."""
        reason = request.finish_reason.value if request.finish_reason else None
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
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
        return (
            b"data: " + self._head
            + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        )  # fmt: skip

    def content_chunk(self, text: str) -> bytes:
        return self._chunk_prefix + _encode(text) + self._chunk_suffix

    def last_chunk(self, request: SimRequest, text: str, with_timings: bool) -> bytes:
        """The chunk carrying ``finish_reason`` (and the timings without a usage chunk)."""
        reason = request.finish_reason.value if request.finish_reason else None
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
        tail: dict[str, Any] = {"choices": [choice], "usage": None}
        if with_timings:
            tail["kvbench"] = self.timings(request)
        return b"data: " + self._head + b"," + _encode(tail)[1:] + b"\n\n"

    def usage_chunk(self, request: SimRequest) -> bytes:
        """The final chunk of ``include_usage`` streams: no choices, usage and timings."""
        tail = {"choices": [], "usage": self.usage(request), "kvbench": self.timings(request)}
        return b"data: " + self._head + b"," + _encode(tail)[1:] + b"\n\n"
