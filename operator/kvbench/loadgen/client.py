"""The measured HTTP path: one streamed OpenAI request, timed, with errors kept as data.

Library choice: aiohttp (with uvloop when installed). The measured path must carry at least
3,000 streamed requests per second on one core with a new TCP connection each, or the client
and not the server sets the pace. Against nginx on this kind of machine
(bench/loadgen_throughput.py) httpx reached about 1,200-1,500 such requests per second, this
path with aiohttp (`force_close`) on uvloop 4,600-5,000, and aiohttp is a well-kept library.
httpx stays where speed does not matter (scrapes, control calls).

Hot-path rules: bodies are encoded before the run; a token chunk is recognised without
parsing its JSON (`"usage":null` plus non-empty text), and only other events are parsed
(the usage chunk, errors, and servers that do not write `"usage":null`).
"""

import asyncio
import json
import time
from typing import Any, Literal

import aiohttp

from kvbench.loadgen.records import ErrorKind
from kvbench.loadgen.workload import Request

__all__ = ["MAX_EVENT_BYTES", "Attempt", "Client", "encode_body", "encode_chat"]

_USAGE_NULL = b'"usage":null'
_NVEXT = b'"nvext"'
_ERROR_BODY_LIMIT = 2000
MAX_EVENT_BYTES = 16 << 20
"""Longest SSE event accepted; the simulator's last chunk of a 100k-token output (its
per-token timestamps) is about 2 MB."""
_GROW_IN_PLACE = 1 << 16


class Attempt:
    """What one request did, as raw perf_counter timestamps; turned into a record later."""

    __slots__ = (
        "chunks",
        "done",
        "due",
        "end",
        "endpoint",
        "error",
        "error_kind",
        "ext",
        "request",
        "start",
        "status",
        "text",
        "token_times",
        "usage",
        "worker_id",
    )

    def __init__(self, request: Request, endpoint: str, due: float) -> None:
        self.request = request
        self.endpoint = endpoint
        self.due = due
        self.start = 0.0
        self.end = 0.0
        self.token_times: list[float] = []
        self.chunks = 0
        self.done = False
        self.status: int | None = None
        self.error_kind: ErrorKind | None = None
        self.error: str | None = None
        self.usage: dict[str, Any] | None = None
        self.ext: dict[str, Any] | None = None
        # the answer's text, kept only where a later turn resends it
        self.text: list[str] | None = [] if request.chat is not None else None
        self.worker_id: int | None = None

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Record the first error only: later ones are consequences."""
        if self.error_kind is None:
            self.error_kind, self.error = kind, message[:_ERROR_BODY_LIMIT]


def _fields(request: Request, model: str, nvext: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if nvext:
        body["nvext"] = {"extra_fields": ["worker_id"]}
    return body


def encode_body(
    request: Request, model: str, api: Literal["completions", "chat"], nvext: bool = False
) -> bytes:
    """The JSON body of a streamed request with usage; `ignore_eos` keeps output lengths exact
    (vLLM's own benchmarks send it too); `nvext` asks a Dynamo frontend for the worker id."""
    body = _fields(request, model, nvext)
    prompt = request.prompt if isinstance(request.prompt, str) else list(request.prompt)
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body, separators=(",", ":")).encode()


def encode_chat(
    request: Request, history: list[dict[str, str]], model: str, nvext: bool = False
) -> bytes:
    """A conversation's turn: the messages so far, then this turn's user text."""
    body = _fields(request, model, nvext)
    body["messages"] = [*history, {"role": "user", "content": request.prompt}]
    return json.dumps(body, separators=(",", ":")).encode()


class Client:
    """An aiohttp session: a new TCP connection per request, or keep-alive if asked."""

    def __init__(
        self,
        connection: Literal["new", "keep-alive"],
        request_timeout: float,
        connect_timeout: float,
    ) -> None:
        self._force_close = connection == "new"
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if self._force_close:
            self._headers["Connection"] = "close"

    async def __aenter__(self) -> "Client":
        connector = aiohttp.TCPConnector(force_close=self._force_close, limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # no cookie work on the measured path
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(self, url: str, body: bytes, attempt: Attempt) -> None:
        """Send and time one request; every failure ends up in `attempt`, never raised."""
        assert self._session is not None, "use Client as an async context manager"
        attempt.start = time.perf_counter()
        try:
            async with self._session.post(url, data=body, headers=self._headers) as resp:
                attempt.status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(_ERROR_BODY_LIMIT)).decode(errors="replace")
                    attempt.fail("http", f"HTTP {resp.status}: {text}")
                else:
                    await _read_stream(resp, attempt)
        except asyncio.CancelledError:
            attempt.fail("cancelled", "the run was stopped before this request finished")
            raise
        except aiohttp.ConnectionTimeoutError as err:
            attempt.fail("connect-timeout", repr(err))
        except TimeoutError as err:
            attempt.fail("timeout", repr(err) if str(err) else "request timed out")
        except aiohttp.ClientConnectorError as err:
            attempt.fail("connect", str(err))
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as err:
            attempt.fail("disconnected", repr(err))
        except aiohttp.ClientError as err:
            attempt.fail("client", repr(err))
        except Exception as err:  # never lose a request: an unexpected failure is data too
            attempt.fail("client", repr(err))
        finally:
            attempt.end = time.perf_counter()
        if attempt.error_kind is None and not attempt.done:
            attempt.fail("incomplete", "the stream ended without data: [DONE]")


async def _read_stream(resp: aiohttp.ClientResponse, attempt: Attempt) -> None:
    """Split the SSE stream into events and timestamp every token chunk as it arrives.

    Written for speed (it runs for every chunk of every request): the common event, one
    `data: ` line, skips the general line splitting, and a network read holding whole events
    is split without a copy. A partial event grows in a bytearray and is searched for its
    end only in the new bytes, so a huge event costs linear time, up to `MAX_EVENT_BYTES`."""
    buf: bytes | bytearray = b""
    scanned = 0  # no event ends before this offset of `buf`
    sep = b"\n\n"
    times = attempt.token_times
    async for chunk in resp.content.iter_any():
        now = time.perf_counter()
        if not buf and not attempt.chunks and b"\r\n" in chunk:
            sep = b"\r\n\r\n"
        if buf:
            buf += chunk
        else:
            buf = chunk
        pos = 0
        while (cut := buf.find(sep, max(pos, scanned))) >= 0:
            event, pos = buf[pos:cut], cut + len(sep)
            if event.startswith(b"data: ") and b"\n" not in event:
                lines = (event[6:],)
            else:
                lines = _data_lines(event)
            for data in lines:
                attempt.chunks += 1
                if _USAGE_NULL in data and data[:1] == b"{" and data[-1:] == b"}":
                    if _has_token(data):
                        times.append(now)
                        if attempt.text is not None:
                            _take_text(json.loads(data), attempt.text)
                    if attempt.worker_id is None and _NVEXT in data:
                        _read_worker(data, attempt)
                elif data == b"[DONE]":
                    attempt.done = True
                else:
                    _parse_event(data, now, attempt)
        if pos:
            buf = buf[pos:]
        if len(buf) > MAX_EVENT_BYTES:
            attempt.fail("malformed", f"an SSE event of more than {MAX_EVENT_BYTES} bytes")
            return
        if len(buf) > _GROW_IN_PLACE and isinstance(buf, bytes):
            buf = bytearray(buf)
        scanned = max(0, len(buf) - len(sep) + 1)


def _data_lines(event: bytes | bytearray) -> tuple[bytes | bytearray, ...]:
    """The data of every `data:` line of a multi-line event (the SSE spec's general form)."""
    return tuple(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))


def _has_token(data: bytes | bytearray) -> bool:
    """A chunk with non-empty text (completions) or content (chat); the role-only first chunk
    of a chat stream is not a token."""
    if b'"text":"' in data:
        return b'"text":""' not in data
    return b'"content":"' in data and b'"content":""' not in data


def _parse_event(data: bytes | bytearray, now: float, attempt: Attempt) -> None:
    """A chunk that is not a plain token chunk: usage, the simulator's extension, Dynamo's
    `nvext` (the worker whose cache the prompt met), an error, or a token chunk from a
    server that leaves `usage` out."""
    try:
        obj = json.loads(data)
    except ValueError:
        attempt.fail("malformed", f"not JSON in the stream: {bytes(data[:200])!r}")
        return
    if not isinstance(obj, dict):
        attempt.fail("malformed", f"an event that is not a JSON object: {bytes(data[:200])!r}")
        return
    if "error" in obj:
        attempt.fail("stream", json.dumps(obj["error"])[:_ERROR_BODY_LIMIT])
        return
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content"):
            attempt.token_times.append(now)
            if attempt.text is not None:
                _take_text(obj, attempt.text)
            break
    if obj.get("usage"):
        attempt.usage = obj["usage"]
    if isinstance(obj.get("kvbench"), dict):
        attempt.ext = obj["kvbench"]
    _take_worker(obj, attempt)


def _take_text(obj: Any, text: list[str]) -> None:
    """The first choice's new text (chat `delta.content`, or completions `text`)."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if choices:
        choice = choices[0]
        piece = (choice.get("delta") or {}).get("content") or choice.get("text")
        if isinstance(piece, str):
            text.append(piece)


def _read_worker(data: bytes | bytearray, attempt: Attempt) -> None:
    """The worker id from a token chunk that carries `nvext` (once per request)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return
    if isinstance(obj, dict):
        _take_worker(obj, attempt)


def _take_worker(obj: dict[str, Any], attempt: Attempt) -> None:
    """Dynamo's `nvext.worker_id.prefill_worker_id`: the worker whose cache the prompt met."""
    worker = (obj.get("nvext") or {}).get("worker_id") or {}
    if isinstance(worker, dict) and isinstance(worker.get("prefill_worker_id"), int):
        attempt.worker_id = worker["prefill_worker_id"]
