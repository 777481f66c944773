"""vLLM's error answers: one JSON shape, and the wording of each kind of failure.

vLLM 0.31.0 answers every error with ``{"error": {"message", "type", "param", "code"}}``
(``ErrorResponse`` in vllm/entrypoints/serve/engine/protocol.py), built in three places that
word it differently, and the simulator keeps the three apart:

- a ``VLLMValidationError`` (request checks in the request models' ``mode="before"``
  validators, ``SamplingParams._verify_args``, the renderer's length checks, the input
  processor): type ``BadRequestError``, ``param`` the parameter, and the message followed by
  ``(parameter=..., value=...)`` as ``VLLMValidationError.__str__`` writes it
  (vllm/exceptions.py, serve/exception_handling/error_response.py);
- FastAPI's ``RequestValidationError`` (bad JSON, a field of the wrong type, a body that is
  not ``application/json``): type ``Bad Request``, ``param`` the first error's location, the
  message ``"N validation error(s):"`` and one line per error
  (serve/exception_handling/handlers/validation.py);
- Starlette's ``HTTPException`` (an unknown path, a wrong method): type and message the
  status phrase (serve/exception_handling/handlers/http.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from kvbench.sim.responses import error_body

__all__ = [
    "ApiError",
    "bad_json",
    "http_error",
    "json_error_middleware",
    "request_validation",
    "unsupported_media_type",
    "vllm_validation",
]

_MAX_REPORTED_ERRORS = 10
_MAX_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000
_BRACKETED = re.compile(r"[\[\]{}()]")
# pydantic-core's names for union branches and wrappers, which vLLM drops from `param`
_INTERNAL_LOC = frozenset(
    {
        "function-wrap", "function-after", "function-before", "function-plain",
        "json-or-python", "lax-or-strict", "chain", "default", "nullable", "tagged-union",
        "union", "call", "arguments", "is-instance", "is-subclass", "callable", "str", "int",
        "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
        "complex", "none", "nonetype",
    }
)  # fmt: skip


class ApiError(Exception):
    """A request answered with vLLM's error body instead of a completion."""

    def __init__(
        self,
        message: str,
        *,
        code: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.err_type = err_type
        self.param = param
        self.close = close

    def body(self) -> bytes:
        return error_body(self.message, self.err_type, self.code, self.param)

    def response(self) -> web.Response:
        response = web.Response(status=self.code, body=self.body(), content_type="application/json")
        if self.close:
            response.force_close()
        return response


def vllm_validation(message: str, parameter: str | None = None, value: Any = None) -> ApiError:
    """A ``VLLMValidationError`` as vLLM's exception handler answers it."""
    extras = [f"parameter={parameter}"] if parameter is not None else []
    if value is not None:
        extras.append(f"value={value}")
    text = f"{message} ({', '.join(extras)})" if extras else message
    return ApiError(text, param=parameter)


def http_error(status: int, message: str | None = None, *, close: bool = False) -> ApiError:
    """An HTTP-level refusal, typed with its status phrase as vLLM's HTTPException handler."""
    phrase = HTTPStatus(status).phrase
    return ApiError(message or phrase, code=status, err_type=phrase, close=close)


def request_validation(errors: list[dict[str, Any] | str]) -> ApiError:
    """FastAPI's ``RequestValidationError`` as vLLM's handler words it."""
    param = None
    first = errors[0] if errors else None
    if isinstance(first, dict) and first.get("loc"):
        param = _clean_loc(tuple(first["loc"]))
    count = len(errors)
    label = "error" if count == 1 else "errors"
    lines = [f"{count} validation {label}:"]
    lines += [f"  {_format_error(err)}" for err in errors[:_MAX_REPORTED_ERRORS]]
    if count > _MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {count - _MAX_REPORTED_ERRORS} more {label}")
    return ApiError("\n".join(lines), err_type=HTTPStatus.BAD_REQUEST.phrase, param=param)


def from_pydantic(exc: ValidationError) -> ApiError:
    """Errors of a request model, located under ``body`` as FastAPI reports them."""
    errors = [
        {**err, "loc": ("body", *err["loc"])} for err in exc.errors(include_url=False)
    ]  # fmt: skip
    return request_validation(errors)  # type: ignore[arg-type]


def bad_json(exc: json.JSONDecodeError) -> ApiError:
    """FastAPI's error for a JSON body ``json.loads`` cannot read (fastapi/routing.py)."""
    return request_validation(
        [
            {
                "type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                "input": {}, "ctx": {"error": exc.msg},
            }
        ]
    )  # fmt: skip


def unsupported_media_type() -> ApiError:
    """vLLM's ``validate_json_request`` (vllm/entrypoints/serve/utils/api_utils.py)."""
    return request_validation(["Unsupported Media Type: Only 'application/json' is allowed"])


def _summarize(value: Any) -> str:
    """A validation error's ``input``, bounded as vLLM bounds it."""
    if isinstance(value, bytes | bytearray):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text[:_MAX_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_INPUT_CHARS else text


def _clean_loc(loc: tuple[Any, ...]) -> str:
    parts = [
        str(p) for p in loc if not _BRACKETED.search(str(p)) and str(p).lower() not in _INTERNAL_LOC
    ]  # fmt: skip
    return ".".join(parts or [str(p) for p in loc])


def _format_error(err: dict[str, Any] | str) -> str:
    if isinstance(err, dict):
        err = dict(err)
        if "input" in err:
            err["input"] = _summarize(err["input"])
        if isinstance(err.get("loc"), tuple | list):
            err["loc"] = _clean_loc(tuple(err["loc"]))
    text = str(err)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (404, 405, 413, ...) in vLLM's JSON shape, not plain text."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason if exc.text in (None, f"{exc.status}: {exc.reason}") else exc.text
        response = http_error(exc.status, message).response()
        if exc.status == HTTPStatus.METHOD_NOT_ALLOWED and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
