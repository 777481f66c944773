"""The part of the kubelet API that serves container logs, over HTTPS.

The apiserver answers `kubectl logs` and GET .../pods/NAME/log by calling
`/containerLogs/NS/POD/CONTAINER?...` on the node's InternalIP and kubelet port;
it does not verify the kubelet's certificate unless told to. Supported
parameters: follow, previous, timestamps, tailLines, limitBytes, sinceSeconds,
sinceTime.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel

from kvbench.testing.container import ContainerRunner

__all__ = ["KubeletApi", "LogQuery"]

Lookup = Callable[[str, str, str], ContainerRunner | None]


class LogQuery(BaseModel):
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: datetime | None = None

    @classmethod
    def parse(cls, query: str) -> LogQuery:
        q = {k: v[-1] for k, v in parse_qs(query).items()}
        since = None
        if "sinceSeconds" in q:
            since = datetime.now(UTC) - timedelta(seconds=int(q["sinceSeconds"]))
        elif "sinceTime" in q:
            since = datetime.fromisoformat(q["sinceTime"].replace("Z", "+00:00"))
        return cls(
            follow=q.get("follow") == "true",
            previous=q.get("previous") == "true",
            timestamps=q.get("timestamps") == "true",
            tail_lines=int(q["tailLines"]) if "tailLines" in q else None,
            limit_bytes=int(q["limitBytes"]) if "limitBytes" in q else None,
            since=since,
        )


def _render(raw: bytes, query: LogQuery) -> bytes | None:
    """One CRI log line as the client sees it, or None if filtered out."""
    stamp, _stream, tag, content = raw.split(b" ", 3)
    if query.since is not None:
        when = datetime.fromisoformat(stamp.decode().replace("Z", "+00:00"))
        if when < query.since:
            return None
    if tag == b"P":
        content = content.removesuffix(b"\n")
    return stamp + b" " + content if query.timestamps else content


class KubeletApi:
    """An HTTPS server on the node's address; `lookup` finds a pod's container."""

    def __init__(self, host: str, port: int, cert: Path, key: Path, lookup: Lookup) -> None:
        self.host = host
        self.requested_port = port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.lookup = lookup
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.requested_port, ssl=self.context
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readline()).decode("latin-1").split()
            while (await reader.readline()).strip():
                pass  # headers: nothing here depends on them
            if len(request) < 2 or request[0] != "GET":
                await _respond(writer, 405, b"only GET is served\n")
                return
            url = urlsplit(request[1])
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            if parts == ["healthz"]:
                await _respond(writer, 200, b"ok")
            elif len(parts) == 4 and parts[0] == "containerLogs":
                namespace, pod, container = parts[1:]
                await self._logs(writer, namespace, pod, container, LogQuery.parse(url.query))
            else:
                await _respond(writer, 404, f"{url.path}: not served by this node agent\n".encode())
        except (ConnectionError, ssl.SSLError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                await writer.wait_closed()

    async def _logs(
        self, writer: asyncio.StreamWriter, ns: str, pod: str, name: str, query: LogQuery
    ) -> None:
        container = self.lookup(ns, pod, name)
        if container is None:
            await _respond(
                writer, 404, f'container "{name}" in pod "{ns}/{pod}" not found\n'.encode()
            )
            return
        restart = container.s.restarts - (1 if query.previous else 0)
        if query.previous and container.s.last_term is None:
            restart = -1
        path = container.log_path(restart)
        if restart < 0 or not path.exists():
            state = "previous terminated container" if query.previous else "container"
            await _respond(writer, 400, f'{state} "{name}" in pod "{pod}" not found\n'.encode())
            return
        await _respond(writer, 200, None)
        budget = query.limit_bytes
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        offset = len(complete)
        lines = complete.splitlines(keepends=True)
        if query.tail_lines is not None:
            lines = lines[-query.tail_lines :] if query.tail_lines > 0 else []
        for raw in lines:
            budget = await _send(writer, _render(raw, query), budget)
            if budget == 0:
                return
        while query.follow and not writer.is_closing():
            live = container.s.state == "running" and container.s.restarts == restart
            with path.open("rb") as log:
                log.seek(offset)
                chunk = log.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            for raw in complete.splitlines(keepends=True):
                budget = await _send(writer, _render(raw, query), budget)
                if budget == 0:
                    return
            if not live:
                return
            await asyncio.sleep(0.2)


async def _send(writer: asyncio.StreamWriter, data: bytes | None, budget: int | None) -> int | None:
    """Write `data` within the byte budget; returns what is left of it (None: unlimited)."""
    if data is None:
        return budget
    if budget is not None:
        data = data[:budget]
        budget -= len(data)
    writer.write(data)
    await writer.drain()
    return budget


async def _respond(writer: asyncio.StreamWriter, code: int, body: bytes | None) -> None:
    """Status line and headers; the body ends when the connection closes."""
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[code]
    writer.write(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    if body is not None:
        writer.write(body)
    await writer.drain()
