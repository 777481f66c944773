"""OpenAI wire schemas as vLLM serves them, plus the simulator's ``kvbench`` extension.

Requests are validated with these models (unknown fields are ignored, as vLLM does).
Responses are written by the fast encoders in ``kvbench.sim.responses``; the response
models here define the contract those encoders must meet, and the tests check the
encoders against them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatLogProbs",
    "ChatMessage",
    "CompletionLogProbs",
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


TokenId = Annotated[int, Field(ge=0)]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _SamplingFields(_Lenient):
    """Fields shared by both endpoints, typed as vLLM types them; ``kvbench.sim.api_checks``
    checks their values. Sampling knobs are accepted and do not change the tokens."""

    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    user: str | None = None


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions``: one prompt, as text or as token ids."""

    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool | None = False

    def single_prompt(self) -> str | list[int] | None:
        """The one prompt the simulator serves (a list of one prompt is that prompt); None
        for several prompts, which vLLM answers with one choice each."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            return prompt[0] if len(prompt) == 1 else None  # type: ignore[return-value]
        return prompt  # type: ignore[return-value]


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
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0


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


class CompletionLogProbs(BaseModel):
    """vLLM's ``CompletionLogProbs``: one entry per token in each list."""

    text_offset: list[int]
    token_logprobs: list[float | None]
    tokens: list[str]
    top_logprobs: list[dict[str, float] | None]


class ChatLogProb(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatLogProbsContent(ChatLogProb):
    top_logprobs: list[ChatLogProb]


class ChatLogProbs(BaseModel):
    """vLLM's ``ChatCompletionLogProbs``."""

    content: list[ChatLogProbsContent] | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
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
    logprobs: CompletionLogProbs | None = None
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
    logprobs: ChatLogProbs | None = None
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
