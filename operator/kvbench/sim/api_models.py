"""OpenAI wire schemas as vLLM serves them, plus the simulator's ``kvbench`` extension.

Requests are validated with these models (unknown fields are ignored, as vLLM does).
Responses are written by the fast encoders in ``kvbench.sim.responses``; the response
models here define the contract those encoders must meet, and the tests check the
encoders against them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatMessage",
    "CompletionRequest",
    "CompletionResponse",
    "CompletionStreamResponse",
    "ErrorInfo",
    "ErrorResponse",
    "KvbenchTimings",
    "StreamOptions",
    "TokenizeChatRequest",
    "TokenizeCompletionRequest",
    "TokenizeResponse",
    "UsageInfo",
]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _SamplingFields(_Lenient):
    """Fields shared by both endpoints; sampling knobs are accepted and ignored."""

    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    user: str | None = None

    @field_validator("n")
    @classmethod
    def _single_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("the simulator serves n=1 only")
        return value


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions``: one prompt, as text or as token ids."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], str | list):
            if len(value) != 1:
                raise ValueError("the simulator serves one prompt per request")
            return value[0]
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be empty")
        return value


class ChatMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message text; content parts other than text are not supported."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content)


class ChatCompletionRequest(_SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class TokenizeCompletionRequest(_Lenient):
    """``POST /tokenize`` with a prompt (vLLM's ``TokenizeCompletionRequest``)."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Lenient):
    """``POST /tokenize`` with chat messages (vLLM's ``TokenizeChatRequest``)."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    return_token_strs: bool | None = False


class TokenizeResponse(BaseModel):
    """vLLM's ``TokenizeResponse``; KV-aware routers read ``tokens`` to score workers."""

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class KvbenchTimings(BaseModel):
    """The simulator's own virtual timings of one request (the ``kvbench`` field)."""

    worker: str
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    token_times: list[float]
    finish_time: float | None
    num_preemptions: int
    cached_tokens: int
    time_scale: float


class PromptTokenUsageInfo(BaseModel):
    cached_tokens: int | None = None


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: PromptTokenUsageInfo | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo
    kvbench: KvbenchTimings


class CompletionStreamChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class CompletionStreamResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None
    kvbench: KvbenchTimings | None = None


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[Any] = Field(default_factory=list)


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    kvbench: KvbenchTimings


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    """vLLM's error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorInfo
