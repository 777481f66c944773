"""The commonest error of a run, in the words a person reads: `HTTP 400 Token id 40012 is out
of vocabulary`, not a JSON body. Messages that differ only in their numbers (the token id, a
length) are one error, so the commonest is the one that failed most requests."""

import json
import re
from collections import Counter
from collections.abc import Iterable

from pydantic import Field

from kvbench.api.base import ApiModel
from kvbench.loadgen.records import RequestRecord

__all__ = ["CommonError", "commonest_error", "error_message"]

_HTTP = re.compile(r"^HTTP (\d{3}): (.*)$", re.DOTALL)
_NUMBER = re.compile(r"\d+")


class CommonError(ApiModel):
    """The error that failed most measured requests of a run."""

    message: str = Field(..., description="One instance of it, as `error_message` words it")
    count: int = Field(..., description="Measured requests that failed with it")
    failed: int = Field(..., description="Measured requests that failed")
    requests: int = Field(..., description="Measured requests")


def _said(body: str) -> tuple[str, int | None]:
    """The message and code of an OpenAI-style error body (`{"error": {"message": ...}}`,
    or the error object itself), else the body as it is."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.strip(), None
    inner = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        code = inner.get("code")
        return inner["message"], code if isinstance(code, int) else None
    if isinstance(inner, str):
        return inner, None
    return body.strip(), None


def error_message(record: RequestRecord) -> str:
    """What went wrong with a failed request, on one line: an error vLLM sent inside a
    stream (after answering 200) is worded with the status it would have had."""
    text = record.error or record.error_kind or "unknown error"
    http = _HTTP.match(text)
    if http:
        text = f"HTTP {http.group(1)} {_said(http.group(2))[0]}"
    elif record.error_kind == "stream":
        message, code = _said(text)
        text = f"HTTP {code} in the stream: {message}" if code else f"in the stream: {message}"
    return " ".join(text.split())


def commonest_error(records: Iterable[RequestRecord]) -> CommonError | None:
    """The commonest error of the measured requests, or None if none failed."""
    measured = [r for r in records if r.phase == "measured"]
    messages = [error_message(r) for r in measured if not r.ok]
    if not messages:
        return None
    shapes = Counter(_NUMBER.sub("#", m) for m in messages)
    shape, count = shapes.most_common(1)[0]
    example = next(m for m in messages if _NUMBER.sub("#", m) == shape)
    return CommonError(message=example, count=count, failed=len(messages), requests=len(measured))
