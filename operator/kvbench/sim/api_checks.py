"""vLLM 0.31.0's request checks, in the order vLLM runs them, with vLLM's words.

1. ``before_completion`` / ``before_chat``: the request models' ``mode="before"`` validators
   (vllm/entrypoints/openai/completion/protocol.py, chat_completion/protocol.py), run on the
   decoded JSON before the fields are typed;
2. ``output_limit`` and ``prompt_length``: the renderer's ``TokenizeParams`` checks
   (vllm/renderers/params.py), after the model name;
3. ``sampling``: ``SamplingParams._verify_args`` (vllm/sampling_params.py), when the request
   is turned into sampling parameters;
4. ``engine_input``: what the engine's input processor refuses
   (vllm/v1/engine/input_processor.py, ``SamplingParams._validate_logprobs``). vLLM raises
   these inside ``generate()``, so a streamed request gets them as an error event after a
   200 and a non-streamed one as a 400.

Each failure is an ``ApiError`` with vLLM's message, type and ``param``. Checks of
parameters the simulator does not model beyond accepting them are left out.
"""

from __future__ import annotations

import math
from typing import Any

from kvbench.sim.api_errors import ApiError, vllm_validation
from kvbench.sim.api_models import ChatCompletionRequest, CompletionRequest

__all__ = [
    "MAX_LOGPROBS",
    "before_chat",
    "before_completion",
    "engine_input",
    "output_limit",
    "prompt_length",
    "sampling",
]

MAX_LOGPROBS = 20
"""vLLM's ``--max-logprobs`` default (vllm/config/model.py)."""
_COMPLETION_MAX_TOKENS = 16


def before_completion(raw: dict[str, Any]) -> dict[str, Any]:
    """``CompletionRequest``'s before-validators; returns the data with a null
    ``max_tokens`` set to the default, as ``normalize_null_max_tokens`` does."""
    _integer_fields(raw, ("prompt_logprobs", "logprobs"))
    _prompt_logprobs(raw)
    logprobs = raw.get("logprobs")
    if logprobs is not None and logprobs < 0 and logprobs != -1:
        raise vllm_validation("`logprobs` must be a positive value or -1.", "logprobs", logprobs)
    _stream_options(raw)
    prompt = raw.get("prompt")
    if (prompt is None or prompt == "") and not raw.get("prompt_embeds"):
        raise vllm_validation(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    if raw.get("max_tokens") is None:
        return raw | {"max_tokens": _COMPLETION_MAX_TOKENS}
    return raw


def before_chat(raw: dict[str, Any]) -> dict[str, Any]:
    """``ChatCompletionRequest``'s before-validators."""
    _stream_options(raw)
    _integer_fields(raw, ("prompt_logprobs", "top_logprobs"))
    _prompt_logprobs(raw)
    top = raw.get("top_logprobs")
    if top is not None:
        if top < 0 and top != -1:
            raise vllm_validation(
                "`top_logprobs` must be a positive value or -1.", "top_logprobs", top
            )
        if (top == -1 or top > 0) and not raw.get("logprobs"):
            raise vllm_validation(
                "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
    return raw


def _integer_fields(raw: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        value = raw.get(name)
        if value is not None and not isinstance(value, int | float):
            raise vllm_validation(f"`{name}` must be an integer.", name, value)


def _prompt_logprobs(raw: dict[str, Any]) -> None:
    value = raw.get("prompt_logprobs")
    if value is None:
        return
    if raw.get("stream") and (value > 0 or value == -1):
        raise vllm_validation(
            "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"
        )
    if value < 0 and value != -1:
        raise vllm_validation(
            "`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", value
        )


def _stream_options(raw: dict[str, Any]) -> None:
    if raw.get("stream_options") and not raw.get("stream"):
        raise vllm_validation(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )


def output_limit(max_model_len: int, max_output: int, param: str) -> None:
    """``TokenizeParams.__post_init__``: more output tokens than the context holds."""
    if max_output > max_model_len:
        raise vllm_validation(
            f"{param}={max_output} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            param,
            max_output,
        )


def prompt_length(num_tokens: int, max_model_len: int, max_output: int, *, text: bool) -> None:
    """``TokenizeParams._token_len_check``. vLLM tokenizes text with ``max_length`` one past
    the limit, so a text prompt that is too long counts as "at least" that many tokens."""
    max_input = max_model_len - max_output
    if num_tokens <= max_input:
        return
    count = max_input + 1 if text else num_tokens
    qualifier = "at least " if count == max_input + 1 else ""
    raise vllm_validation(
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {max_output} output tokens and your prompt contains {qualifier}{count} "
        f"input tokens, for a total of {qualifier}{count + max_output} tokens. Please reduce "
        "the length of the input prompt or the number of requested output tokens.",
        "input_tokens",
        count,
    )


def sampling(body: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> None:
    """``SamplingParams._verify_args`` on the request's values (unset ones take vLLM's
    defaults), then the simulator's own limit of one choice per request."""
    n = 1 if body.n is None else body.n
    if n < 1:
        raise vllm_validation(f"n must be at least 1, got {n}.")
    _range("presence_penalty", body.presence_penalty, 0.0, -2.0, 2.0)
    _range("frequency_penalty", body.frequency_penalty, 0.0, -2.0, 2.0)
    repetition = 1.0 if body.repetition_penalty is None else body.repetition_penalty
    if not math.isfinite(repetition):
        raise vllm_validation(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition <= 0.0:
        raise vllm_validation(f"repetition_penalty must be greater than zero, got {repetition}.")
    temperature = 1.0 if body.temperature is None else body.temperature
    if not math.isfinite(temperature):
        raise vllm_validation(
            f"temperature must be a finite number, got {temperature}.", "temperature", temperature
        )
    if temperature < 0.0:
        raise vllm_validation(
            f"temperature must be non-negative, got {temperature}.", "temperature", temperature
        )
    if temperature > 2.0:
        raise vllm_validation(
            f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature
        )
    top_p = 1.0 if body.top_p is None else body.top_p
    if not 0.0 < top_p <= 1.0:
        raise vllm_validation(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)
    top_k = 0 if body.top_k is None else body.top_k
    if top_k < -1:
        raise vllm_validation(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    _range("min_p", body.min_p, 0.0, 0.0, 1.0)
    if max_tokens < 1:
        raise vllm_validation(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    if body.min_tokens < 0:
        raise vllm_validation(
            f"min_tokens must be greater than or equal to 0, got {body.min_tokens}."
        )
    if body.min_tokens > max_tokens:
        raise vllm_validation(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
            f"got {body.min_tokens}."
        )
    if n != 1:
        raise ApiError("the simulator serves n=1 only", param="n")


def _range(name: str, value: float | None, default: float, low: float, high: float) -> None:
    actual = default if value is None else value
    if not low <= actual <= high:
        raise vllm_validation(f"{name} must be in [{low:g}, {high:g}], got {actual}.")


def engine_input(tokens: list[int], vocab_size: int, num_logprobs: int | None) -> ApiError | None:
    """The input processor's refusals, returned rather than raised: the caller answers
    them as vLLM does, in the stream when the request streams."""
    if num_logprobs:
        wanted = vocab_size if num_logprobs == -1 else num_logprobs
        if wanted > MAX_LOGPROBS:
            return vllm_validation(
                f"Requested sample logprobs of {wanted}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                "logprobs",
                wanted,
            )
    if not tokens:
        return vllm_validation("The decoder prompt cannot be empty")
    high = max(tokens)  # negative ids are refused with the request's fields
    if high > vocab_size - 1:
        return vllm_validation(f"Token id {high} is out of vocabulary")
    return None
