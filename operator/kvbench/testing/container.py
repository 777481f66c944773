"""One container of a pod as a local process: start, logs, probes, restarts, stop.

Its state is what the pod's `containerStatuses` entry reports; the pod runner
renders that and decides the pod's phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from kvbench.procs import set_parent_death_signal
from kvbench.testing.images import UnknownImageError, local_argv
from kvbench.testing.kubeapi import KubeApiError
from kvbench.testing.podenv import ContainerConfigError, expand
from kvbench.testing.probes import ProbeLoop
from kvbench.testing.volumes import Mount, wrap_in_namespace

__all__ = ["ContainerRunner", "LaunchSpec", "now_rfc3339"]

Obj = dict[str, Any]
_BACKOFF_START, _BACKOFF_MAX = 1.0, 30.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class LaunchSpec:
    """What a container needs to start: resolved env, mounts and working directory."""

    env: dict[str, str]
    mounts: list[Mount]
    workdir: Path


Prepare = Callable[[], Awaitable[LaunchSpec]]
Record = Callable[[str, str, str], None]
"""record(kind, reason, message): an event about this container (kind Normal or Warning)."""


@dataclass
class _State:
    state: str = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    exit_code: int = 0
    term: Obj | None = None
    last_term: Obj | None = None
    restarts: int = 0
    ready: bool = False
    started: bool = False


class ContainerRunner:
    """Runs `container` under `restart_policy`, calling `changed()` on every state change."""

    def __init__(
        self,
        container: Obj,
        pod_ip: str,
        logs_dir: Path,
        prepare: Prepare,
        changed: Callable[[], None],
        restart_policy: str,
        container_id_prefix: str,
        record: Record,
    ) -> None:
        self.container = container
        self.name: str = container["name"]
        self.pod_ip = pod_ip
        self.logs_dir = logs_dir / self.name
        self.prepare = prepare
        self.changed = changed
        self.restart_policy = restart_policy
        self.id_prefix = container_id_prefix
        self.record = record
        self.s = _State()
        self.process: asyncio.subprocess.Process | None = None
        self.stopping = False
        self._wake = asyncio.Event()

    @property
    def has_run(self) -> bool:
        return self.s.state != "waiting" or self.s.term is not None or self.s.last_term is not None

    def log_path(self, restart: int) -> Path:
        return self.logs_dir / f"{restart}.log"

    def _set(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.s, key, value)
        self.changed()

    async def run(self) -> int:
        """Run until the policy says stop (returns the last exit code) or `stop()` is called."""
        backoff = _BACKOFF_START
        while not self.stopping:
            try:
                spec = await self.prepare()
                argv = self._argv(spec)
            except UnknownImageError as err:
                self._waiting_on_error("ErrImagePull", str(err))
                await self._sleep(None)
                continue
            except (ContainerConfigError, KubeApiError, httpx.HTTPError) as err:
                self._waiting_on_error("CreateContainerConfigError", str(err))
                await self._sleep(2.0)
                continue
            code = await self._run_process(argv, spec)
            if self.stopping or not self._restarts_after(code):
                return code
            self._set(
                state="waiting", reason="CrashLoopBackOff", message=f"back-off {backoff}s",
                last_term=self.s.term, term=None,
            )  # fmt: skip
            self.record("Warning", "BackOff", "Back-off restarting failed container")
            await self._sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)
            self.s.restarts += 1
        return self.s.exit_code

    def _waiting_on_error(self, reason: str, message: str) -> None:
        if (self.s.reason, self.s.message) != (reason, message):
            self.record("Warning", "Failed", f"Error: {message}")
        self._set(state="waiting", reason=reason, message=message)

    def _restarts_after(self, code: int) -> bool:
        return self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0)

    def _argv(self, spec: LaunchSpec) -> list[str]:
        expanded = {
            key: [expand(part, spec.env) for part in self.container.get(key, [])]
            for key in ("command", "args")
        }
        argv = local_argv({**self.container, **expanded}, self.pod_ip)
        return wrap_in_namespace(argv, spec.mounts)

    async def _sleep(self, seconds: float | None) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _run_process(self, argv: list[str], spec: LaunchSpec) -> int:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        spec.workdir.mkdir(parents=True, exist_ok=True)
        image = self.container.get("image", "")
        self.record("Normal", "Pulled", f'Container image "{image}" already present on machine')
        self.record("Normal", "Created", f"Created container {self.name}")
        try:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                env=spec.env,
                cwd=self.container.get("workingDir") or spec.workdir,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=set_parent_death_signal,
                limit=1 << 20,
            )
        except OSError as err:
            self.record("Warning", "Failed", f"Error: {err}")
            self._terminated(128, "StartError", str(err), now_rfc3339())
            return 128
        self.record("Normal", "Started", f"Started container {self.name}")
        started_at = now_rfc3339()
        self._set(
            state="running", reason="", message="", started_at=started_at, ready=False,
            started="startupProbe" not in self.container,
            last_term=self.s.term or self.s.last_term, term=None,
        )  # fmt: skip
        log = self.log_path(self.s.restarts).open("ab")
        probes = [asyncio.create_task(t) for t in self._probe_tasks(spec)]
        pumps = asyncio.gather(
            _pump(self.process.stdout, log, b"stdout"),
            _pump(self.process.stderr, log, b"stderr"),
        )
        try:
            code = await self.process.wait()
            self._kill(signal.SIGKILL)  # what it left running dies with it, as in a container
            await pumps
        finally:
            pumps.cancel()
            for task in probes:
                task.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
            log.close()
        code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as runtimes say
        self._terminated(code, "Completed" if code == 0 else "Error", "", started_at)
        return code

    def _terminated(self, code: int, reason: str, message: str, started_at: str) -> None:
        record = {
            "exitCode": code,
            "reason": reason,
            "startedAt": started_at,
            "finishedAt": now_rfc3339(),
            "containerID": self.container_id,
        }
        if message:
            record["message"] = message
        self._set(state="terminated", exit_code=code, ready=False, term=record)

    @property
    def container_id(self) -> str:
        return f"{self.id_prefix}-{self.name}-{self.s.restarts}"

    def _probe_tasks(self, spec: LaunchSpec) -> list[Coroutine[Any, Any, None]]:
        """Startup first; readiness and liveness once started; a failed startup or
        liveness probe kills the container (its restart policy decides what follows)."""
        pid = self.process.pid if self.process else None

        def loop(kind: str, on_change: Callable[[bool], None]) -> ProbeLoop | None:
            probe = self.container.get(kind)
            if probe is None:
                return None
            return ProbeLoop(probe, self.pod_ip, self.container, spec.env, pid, on_change)

        started = asyncio.Event()

        def on_startup(ok: bool) -> None:
            if ok:
                started.set()
                self._set(started=True)
            else:
                self.record("Warning", "Unhealthy", "Startup probe failed")
                self._kill_unhealthy("startup")

        def on_readiness(ok: bool) -> None:
            if not ok:
                self.record("Warning", "Unhealthy", "Readiness probe failed")
            self._set(ready=ok)

        def on_liveness(ok: bool) -> None:
            if not ok:
                self.record("Warning", "Unhealthy", "Liveness probe failed")
                self._kill_unhealthy("liveness")

        tasks: list[Coroutine[Any, Any, None]] = []
        startup = loop("startupProbe", on_startup)
        if startup is None:
            started.set()
        else:
            tasks.append(startup.run(until_success=True))
        readiness = loop("readinessProbe", on_readiness)
        if readiness is None:
            self._set(ready=True)
        else:
            tasks.append(readiness.run(after=started))
        liveness = loop("livenessProbe", on_liveness)
        if liveness is not None:
            tasks.append(liveness.run(after=started))
        return tasks

    def _kill_unhealthy(self, probe: str) -> None:
        message = f"Container {self.name} failed {probe} probe, will be restarted"
        self.record("Normal", "Killing", message)
        self._kill(signal.SIGKILL)

    def _kill(self, sig: int) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    async def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; no restart afterwards."""
        self.stopping = True
        self._wake.set()
        if self.process is None or self.process.returncode is not None:
            return
        self.record("Normal", "Killing", f"Stopping container {self.name}")
        self._kill(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.process.wait()), grace)
        except TimeoutError:
            self._kill(signal.SIGKILL)
            await self.process.wait()
        self._kill(signal.SIGKILL)  # whatever it left behind in its group

    def status(self) -> Obj:
        """This container's entry of the pod's containerStatuses."""
        s = self.s
        if s.state == "running":
            state: Obj = {"running": {"startedAt": s.started_at}}
        elif s.state == "terminated" and s.term is not None:
            state = {"terminated": dict(s.term)}
        else:
            state = {
                "waiting": {"reason": s.reason, **({"message": s.message} if s.message else {})}
            }
        return {
            "name": self.name,
            "image": self.container.get("image", ""),
            "imageID": f"kvbench-local://{self.container.get('image', '')}",
            "containerID": self.container_id,
            "state": state,
            "lastState": {"terminated": s.last_term} if s.last_term else {},
            "ready": s.ready and s.started and s.state == "running",
            "restartCount": s.restarts,
            "started": s.started and s.state == "running",
        }


async def _pump(stream: asyncio.StreamReader | None, log: Any, name: bytes) -> None:
    """Copy a pipe into the log in the CRI format: `TIME STREAM F|P LINE`."""
    if stream is None:
        return
    while True:
        try:
            line, tag = await stream.readuntil(b"\n"), b"F"
        except asyncio.IncompleteReadError as err:
            line, tag = err.partial, b"F"
            if not line:
                return
        except asyncio.LimitOverrunError as err:
            line, tag = await stream.readexactly(err.consumed), b"P"
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
        log.write(
            b"%s %s %s %s" % (stamp, name, tag, line if line.endswith(b"\n") else line + b"\n")
        )
        log.flush()
