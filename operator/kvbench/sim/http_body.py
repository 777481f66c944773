"""Reading a request's JSON body as vLLM's routes read it, within the simulator's limits.

vLLM's completion, chat and tokenize routes accept only ``Content-Type: application/json``
(``validate_json_request``, vllm/entrypoints/serve/utils/api_utils.py) and decode the body
with ``json.loads`` (Starlette's ``Request.json``); a body ``json.loads`` cannot read is
FastAPI's ``json_invalid`` error, an empty one a missing body, and any other failure to
decode (not UTF-8, nested too deep) FastAPI's "There was an error parsing the body"
(fastapi/routing.py, 0.136).

vLLM sets no limit on a body's size or on the time it takes to arrive (uvicorn and FastAPI
read whatever comes). The simulator refuses, with vLLM's error shape:

- a body over ``limit`` bytes: 413, at once when ``Content-Length`` says so (the body is
  not read), else as soon as the bytes read pass the limit. Decoding runs on the event
  loop (``json.loads`` holds the GIL, a thread would not free the loop), so the limit is
  what bounds how long one body can stall every other client;
- a body that has not arrived ``timeout`` seconds after its headers: 408, connection closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import StreamReader, web

from kvbench.sim.api_errors import (
    ApiError,
    bad_json,
    http_error,
    request_validation,
    unsupported_media_type,
)

__all__ = ["read_json"]


async def read_json(request: web.Request, *, limit: int, timeout: float) -> Any:
    """The decoded body, or an ``ApiError`` as vLLM (or the limits above) answers."""
    size = request.content_length
    if size is not None and size > limit:
        raise _too_large(size, limit)
    media = request.headers.get("Content-Type", "").lower().split(";", maxsplit=1)[0]
    if media != "application/json":
        raise unsupported_media_type()
    content = request.content
    if content.is_eof():  # the whole body came with the headers: the common case
        body = content.read_nowait()
    else:
        body = await _read_body(content, limit, timeout)
    if len(body) > limit:
        raise _too_large(None, limit)
    if not body:
        raise request_validation(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise bad_json(exc) from None
    except (UnicodeDecodeError, RecursionError):  # not UTF-8, or nested past Python's stack
        raise http_error(400, "There was an error parsing the body") from None


async def _read_body(content: StreamReader, limit: int, timeout: float) -> bytes:
    """Up to ``limit + 1`` bytes of a body still arriving, within ``timeout``."""
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(timeout):
            while total <= limit and (chunk := await content.read(limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
    except TimeoutError:
        raise http_error(
            408, f"The request body did not arrive within {timeout:g} s.", close=True
        ) from None
    return b"".join(chunks)


def _too_large(size: int | None, limit: int) -> ApiError:
    what = f"of {size} bytes" if size is not None else "over the limit"
    return http_error(
        413,
        f"Request body {what} exceeds the simulator's limit of {limit} bytes "
        "(--max-request-body-bytes).",
    )
