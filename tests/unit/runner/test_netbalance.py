"""The local back end's Service balancer (`kvbench.netbalance`): one backend per connection,
picked at random, half-closes relayed, the current backends followed."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from kvbench.netbalance import TcpBalancer


async def _named_server(host: str, name: bytes) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # until the client half-closes
        writer.write(name + b":" + data)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, host, 0)


async def _ask(host: str, port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(payload)
    writer.write_eof()
    answer = await reader.read()
    writer.close()
    return answer


def test_balancer_sends_each_connection_to_one_backend_and_relays_half_closes() -> None:
    async def scenario() -> Counter[bytes]:
        servers = [await _named_server("127.0.0.1", n) for n in (b"a", b"b", b"c")]
        backends = [("127.0.0.1", s.sockets[0].getsockname()[1]) for s in servers]
        seen: Counter[bytes] = Counter()
        async with TcpBalancer("127.0.0.1", 0, lambda: backends, random.Random(7)) as lb:
            for _ in range(60):
                name, _, echoed = (await _ask("127.0.0.1", lb.port, b"ping")).partition(b":")
                assert echoed == b"ping"
                seen[name] += 1
            assert sum(lb.connections.values()) == 60
        for server in servers:
            server.close()
        return seen

    seen = asyncio.run(scenario())
    assert set(seen) == {b"a", b"b", b"c"}


def test_balancer_follows_the_current_backends_and_closes_without_any() -> None:
    async def scenario() -> bytes:
        server = await _named_server("127.0.0.1", b"only")
        current: list[tuple[str, int]] = []
        async with TcpBalancer("127.0.0.1", 0, lambda: current) as lb:
            with pytest.raises(ConnectionResetError):
                await _ask("127.0.0.1", lb.port, b"x")
            current.append(("127.0.0.1", server.sockets[0].getsockname()[1]))
            served = await _ask("127.0.0.1", lb.port, b"x")
        server.close()
        return served

    assert asyncio.run(scenario()) == b"only:x"
