"""A per-connection TCP balancer: each new connection goes to one random backend.

This is what a Kubernetes Service does in kube-proxy's iptables mode: the choice
is made once per connection (never per request), among the backends current at
that moment. The test cluster's service proxy and the local runner share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence

__all__ = ["Backend", "TcpBalancer"]

Backend = tuple[str, int]
_CHUNK = 64 * 1024
log = logging.getLogger(__name__)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the far side so it sees the EOF too."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


class TcpBalancer:
    """Listens on `host:port`; splices every accepted connection to a random backend.

    `backends` is called for every new connection, so the set can change at any
    time. With no backend, or when the chosen one refuses, the client's
    connection is reset, as with a Service that has no ready endpoint.
    """

    def __init__(
        self,
        host: str,
        port: int,
        backends: Callable[[], Sequence[Backend]],
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.backends = backends
        self.rng = rng or random.Random()
        self.connections: Counter[Backend] = Counter()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (differs from the requested one when that was 0)."""
        if self._server is None:
            raise RuntimeError("balancer not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.requested_port, reuse_address=True
        )

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> TcpBalancer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._tasks.discard(task)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        choices = list(self.backends())
        if not choices:
            log.debug("%s:%s: no backend, resetting", self.host, self.requested_port)
            client_w.transport.abort()
            return
        backend = self.rng.choice(choices)
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*backend)
        except OSError as err:
            log.debug("%s:%s: backend %s failed: %s", self.host, self.port, backend, err)
            client_w.transport.abort()
            return
        self.connections[backend] += 1
        try:
            await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
        finally:
            for writer in (client_w, upstream_w):
                writer.close()
                with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                    await writer.wait_closed()
