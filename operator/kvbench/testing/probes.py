"""Container probes (httpGet, tcpSocket, exec), run on the kubelet's schedule.

A `ProbeLoop` applies initialDelaySeconds, periodSeconds, timeoutSeconds and the
success/failure thresholds, and reports each flip of its result.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import httpx

from kvbench.testing.images import UnknownImageError, executable

__all__ = ["ProbeLoop", "probe_once", "resolve_port"]

Obj = dict[str, Any]


def resolve_port(port: int | str, container: Obj) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"container {container['name']!r} has no port named {port!r}")


async def _http(spec: Obj, host: str, container: Obj, timeout: float) -> bool:
    scheme = spec.get("scheme", "HTTP").lower()
    port = resolve_port(spec["port"], container)
    path = spec.get("path", "/")
    headers = {h["name"]: h["value"] for h in spec.get("httpHeaders", [])}
    url = f"{scheme}://{spec.get('host') or host}:{port}{path}"
    async with httpx.AsyncClient(verify=False, timeout=timeout) as client:
        response = await client.get(url, headers=headers)
    return 200 <= response.status_code < 400


async def _tcp(spec: Obj, host: str, container: Obj, timeout: float) -> bool:
    port = resolve_port(spec["port"], container)
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(spec.get("host") or host, port), timeout
    )
    writer.close()
    return True


async def _exec(spec: Obj, env: dict[str, str], pid: int | None, timeout: float) -> bool:
    command = list(spec["command"])
    argv = [executable(command[0]), *command[1:]]
    if pid is not None and os.path.exists(f"/proc/{pid}/ns/mnt"):
        argv = ["nsenter", "-t", str(pid), "-m", "--", *argv]  # see the container's mounts
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        return await asyncio.wait_for(process.wait(), timeout) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def probe_once(
    probe: Obj, pod_ip: str, container: Obj, env: dict[str, str], pid: int | None
) -> bool:
    """One attempt: True on success; errors and timeouts are failures."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            return await _http(probe["httpGet"], pod_ip, container, timeout)
        if "tcpSocket" in probe:
            return await _tcp(probe["tcpSocket"], pod_ip, container, timeout)
        if "exec" in probe:
            return await _exec(probe["exec"], env, pid, timeout)
    except (OSError, httpx.HTTPError, TimeoutError, ValueError, UnknownImageError):
        return False
    return False


class ProbeLoop:
    """Runs one probe until cancelled; `result` follows the thresholds."""

    def __init__(
        self,
        probe: Obj,
        pod_ip: str,
        container: Obj,
        env: dict[str, str],
        pid: int | None,
        on_change: Callable[[bool], None],
    ) -> None:
        self.probe = probe
        self.args = (pod_ip, container, env, pid)
        self.on_change = on_change
        self.result: bool | None = None

    async def run(self, after: asyncio.Event | None = None, until_success: bool = False) -> None:
        """Probe once `after` is set (liveness and readiness wait for startup); a startup
        probe (`until_success`) ends at its first success."""
        if after is not None:
            await after.wait()
        period = float(self.probe.get("periodSeconds", 10))
        needed = {
            True: int(self.probe.get("successThreshold", 1)),
            False: int(self.probe.get("failureThreshold", 3)),
        }
        streak: tuple[bool, int] = (False, 0)
        await asyncio.sleep(float(self.probe.get("initialDelaySeconds", 0)))
        while True:
            ok = await probe_once(self.probe, *self.args)
            streak = (ok, streak[1] + 1) if streak[0] == ok else (ok, 1)
            if streak[1] >= needed[ok] and self.result is not ok:
                self.result = ok
                self.on_change(ok)
                if ok and until_success:
                    return
            await asyncio.sleep(period)
