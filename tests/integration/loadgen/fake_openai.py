"""A small OpenAI-style streaming server on loopback for the load generator's proof tests.

It runs its own event loop in a thread (the load generator runs another), speaks HTTP/1.1
by hand so that it can count TCP connections, keeps every request body in arrival order,
streams vLLM-shaped SSE chunks with chunked transfer encoding (as uvicorn does), serves
/metrics with vLLM's counter names, and can be told to fail in several ways, down to
writing any bytes at all as the response (`raw_response`).
"""

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Behaviour", "FakeOpenAI"]


@dataclass
class Behaviour:
    """How the server answers request number `n` (0-based, in arrival order)."""

    status: Callable[[int], int] = lambda n: 200
    cached_tokens: Callable[[int, dict[str, Any]], int] = lambda n, body: 0
    cut_after_tokens: Callable[[int], int | None] = lambda n: None
    stall: Callable[[int], bool] = lambda n: False
    raw_stream: Callable[[int, dict[str, Any]], list[bytes]] | None = None
    raw_response: Callable[[int, dict[str, Any]], list[bytes | float]] | None = None
    """The whole response, status line included, written piece by piece as it is (a float is
    a pause of that many seconds); the connection is closed after it."""
    crlf: bool = False
    count_delay: float = 0.0
    """Seconds after a response before /metrics counts it (vLLM records stats a moment late)."""


@dataclass
class _Counters:
    queries: int = 0
    hits: int = 0
    prompt: int = 0
    generation: int = 0
    success: int = 0


@dataclass
class FakeOpenAI:
    """Start with `start()`, stop with `stop()`; `url` is its base URL."""

    behaviour: Behaviour = field(default_factory=Behaviour)
    connections: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    counters: _Counters = field(default_factory=_Counters)

    def start(self) -> "FakeOpenAI":
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                close = headers.get("connection", "").lower() == "close"
                if method == "GET" and path == "/metrics":
                    await self._metrics(writer)
                elif self.behaviour.raw_response is not None:
                    await self._raw(json.loads(body), writer)
                    break
                else:
                    await self._completion(json.loads(body), writer, close)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _raw(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        n = len(self.bodies)
        self.bodies.append(body)
        assert self.behaviour.raw_response is not None
        for piece in self.behaviour.raw_response(n, body):
            if isinstance(piece, float):
                await asyncio.sleep(piece)
            else:
                writer.write(piece)
                await writer.drain()

    async def _metrics(self, writer: asyncio.StreamWriter) -> None:
        c, labels = self.counters, '{engine="0",model_name="m"}'
        text = "".join(
            f"# TYPE vllm:{name} counter\nvllm:{name}_total{labels} {value}\n"
            for name, value in (
                ("prefix_cache_queries", c.queries),
                ("prefix_cache_hits", c.hits),
                ("num_preemptions", 0),
                ("prompt_tokens", c.prompt),
                ("generation_tokens", c.generation),
            )
        )
        text += (
            f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {c.success}\n'
        )
        data = text.encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
            + str(len(data)).encode()
            + b"\r\n\r\n"
            + data
        )
        await writer.drain()

    async def _completion(
        self, body: dict[str, Any], writer: asyncio.StreamWriter, close: bool
    ) -> None:
        n = len(self.bodies)
        self.bodies.append(body)
        b = self.behaviour
        if b.stall(n):
            await asyncio.sleep(3600)
        status = b.status(n)
        if status != 200:
            msg = json.dumps({"error": {"message": "injected failure", "code": status}}).encode()
            writer.write(
                f"HTTP/1.1 {status} Error\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(msg)}\r\n\r\n".encode()
                + msg
            )
            await writer.drain()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n"
            + (b"Connection: close\r\n" if close else b"")
            + b"\r\n"
        )
        events = b.raw_stream(n, body) if b.raw_stream else self._events(n, body)
        for event in events:
            if b.crlf:
                event = event.replace(b"\n", b"\r\n")
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _events(self, n: int, body: dict[str, Any]) -> list[bytes]:
        prompt = body.get("prompt") or body["messages"][0]["content"]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        tokens, cut = body["max_tokens"], self.behaviour.cut_after_tokens(n)
        cached = self.behaviour.cached_tokens(n, body)
        out = []
        for i in range(tokens if cut is None else cut):
            chunk = {"id": "c", "choices": [{"index": 0, "text": f" t{i}"}], "usage": None}
            out.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
        if cut is not None:
            return out
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": prompt_tokens + tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        final = {"id": "c", "choices": [], "usage": usage}
        out.append(b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n")
        out.append(b"data: [DONE]\n\n")

        def count() -> None:
            c = self.counters
            c.queries += prompt_tokens
            c.hits += cached
            c.prompt += prompt_tokens
            c.generation += tokens
            c.success += 1

        if self.behaviour.count_delay:
            asyncio.get_running_loop().call_later(self.behaviour.count_delay, count)
        else:
            count()
        return out
