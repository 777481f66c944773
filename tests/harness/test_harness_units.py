"""Pieces of the harness that need no cluster: balancer, image table, env, logs, addresses."""

from __future__ import annotations

import asyncio
import random
import sys
from collections import Counter

import pytest

from kvbench.netbalance import TcpBalancer
from kvbench.testing.images import UnknownImageError, local_argv, repository
from kvbench.testing.kubeletapi import LogQuery, _render
from kvbench.testing.layout import ClusterLayout
from kvbench.testing.nodeagent import IpPool
from kvbench.testing.podenv import ContainerConfigError, expand, resolve_env
from kvbench.testing.serviceproxy import ready_backends


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


def test_image_table_maps_vllm_args_to_the_simulator_on_the_pod_ip() -> None:
    container = {
        "image": "docker.io/vllm/vllm-openai:v0.31.0",
        "args": ["Qwen/Qwen3-0.6B", "--port", "8000", "--host", "0.0.0.0"],
    }
    argv = local_argv(container, "127.64.1.7")
    assert argv == [sys.executable, "-m", "kvbench.sim", "--model", "Qwen/Qwen3-0.6B",
                    "--port", "8000", "--host", "127.64.1.7"]  # fmt: skip
    served = local_argv({**container, "command": ["vllm", "serve"], "args": ["m"]}, "127.0.0.5")
    assert served[3:] == ["--model", "m", "--host", "127.0.0.5"]


def test_image_table_runs_the_project_image_command_and_refuses_unknown_images() -> None:
    argv = local_argv(
        {"image": "ghcr.io/x/kvbench:1@sha256:ab", "command": ["python", "-V"]}, "127.0.0.5"
    )
    assert argv == [sys.executable, "-V"]
    assert local_argv({"image": "kvbench", "args": ["--help"]}, "1")[1:] == ["--help"]
    assert repository("registry:5000/a/kvbench:tag") == "registry:5000/a/kvbench"
    with pytest.raises(UnknownImageError, match="IMAGE_TABLE"):
        local_argv({"image": "nginx:1.25"}, "127.0.0.5")


def test_env_resolution_follows_kubernetes_rules() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
           "spec": {"nodeName": "n"}, "status": {"podIP": "127.64.1.2"}}  # fmt: skip
    stores = {("configmaps", "cm"): {"data": {"k": "v"}},
              ("secrets", "s"): {"data": {"t": "c2VjcmV0"}}}  # fmt: skip

    async def fetch(kind: str, namespace: str, name: str) -> dict | None:
        assert namespace == "ns"
        return stores.get((kind, name))

    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            {"name": "URL", "value": "http://$(IP):80/$(MISSING)/$$(IP)"},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "no", "key": "k",
                                                              "optional": True}}},
        ],
    }  # fmt: skip
    env = asyncio.run(resolve_env(container, pod, fetch, {"PATH": "/bin"}))
    assert env == {"PATH": "/bin", "CM_k": "v", "IP": "127.64.1.2", "APP": "x",
                   "TOKEN": "secret", "URL": "http://127.64.1.2:80/$(MISSING)/$(IP)"}  # fmt: skip
    missing = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]}
    with pytest.raises(ContainerConfigError, match="gone"):
        asyncio.run(resolve_env(missing, pod, fetch, {}))
    assert expand("$(A)-$(B)", {"A": "1"}) == "1-$(B)"


def test_service_backends_are_the_ready_endpoints_of_the_named_port() -> None:
    slices = [{
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "m", "port": 9}],
        "endpoints": [
            {"addresses": ["127.64.1.1"], "conditions": {"ready": True}},
            {"addresses": ["127.64.1.2"], "conditions": {"ready": False}},
            {"addresses": ["127.64.2.1"]},
        ],
    }]  # fmt: skip
    assert ready_backends(slices, "http") == [("127.64.1.1", 8080), ("127.64.2.1", 8080)]
    assert ready_backends(slices, "other") == []


def test_pod_ips_come_round_robin_from_the_nodes_range() -> None:
    layout = ClusterLayout(slot=3)
    assert layout.service_cidr == "127.99.0.0/16"
    assert (layout.node_ip(0), layout.pod_cidr(0)) == ("127.67.0.1", "127.67.1.0/24")
    pool = IpPool(layout.pod_cidr(0))
    first, second = pool.allocate(), pool.allocate()
    pool.release(first)
    assert (first, second, pool.allocate()) == ("127.67.1.1", "127.67.1.2", "127.67.1.3")


def test_log_lines_render_with_or_without_timestamps_and_since() -> None:
    line = b"2026-01-02T03:04:05.000006Z stdout F hello\n"
    assert _render(line, LogQuery()) == b"hello\n"
    assert _render(line, LogQuery(timestamps=True)) == b"2026-01-02T03:04:05.000006Z hello\n"
    late = LogQuery.parse("sinceTime=2026-01-02T03:04:06Z")
    assert _render(line, late) is None
    partial = b"2026-01-02T03:04:05.000006Z stdout P part\n"
    assert _render(partial, LogQuery()) == b"part"
