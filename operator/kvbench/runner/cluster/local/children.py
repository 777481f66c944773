"""The local back end's children: processes that outlive the runner, registered on disk.

Like pods on a cluster, local workers, arms and load generators keep running when the runner
that started them is killed, so the next runner can adopt a load still under way. Each is
written to `children/<name>.json` the moment it is spawned and removed only once it is dead,
so nothing started is ever forgotten: an interrupted stop is finished by the next teardown.
A process is identified by PID and kernel start time, so a reused PID is never mistaken for it.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kvbench.procs import tail

__all__ = ["Child", "ChildKind", "LocalChildren"]

ChildKind = Literal["worker", "arm", "load"]


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class Child(BaseModel):
    """One registered process."""

    name: str
    kind: ChildKind
    pid: int
    start_ticks: int
    uid: str
    log: str
    owner: str | None = None

    @property
    def log_path(self) -> Path:
        return Path(self.log)

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log_path, lines)


class LocalChildren:
    """The registry of one results directory's local processes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._popens: dict[int, subprocess.Popen[bytes]] = {}

    def _file(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def spawn(
        self,
        name: str,
        kind: ChildKind,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
    ) -> Child:
        """Start a process in its own session (stopping it stops its children) and register
        it before returning."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        self._popens[popen.pid] = popen
        ticks = _start_ticks(popen.pid)
        child = Child(
            name=name,
            kind=kind,
            pid=popen.pid,
            start_ticks=ticks if ticks is not None else -1,
            uid=str(uuid.uuid4()),
            log=str(log_path),
            owner=owner,
        )
        partial = self._file(name).with_suffix(".partial")
        partial.write_text(child.model_dump_json())
        os.replace(partial, self._file(name))
        return child

    def get(self, name: str) -> Child | None:
        try:
            return Child.model_validate_json(self._file(name).read_text())
        except FileNotFoundError:
            return None

    def all(self, kind: ChildKind | None = None) -> list[Child]:
        children = [Child.model_validate_json(p.read_text()) for p in self.root.glob("*.json")]
        return sorted((c for c in children if kind in (None, c.kind)), key=lambda c: c.name)

    def alive(self, child: Child) -> bool:
        popen = self._popens.get(child.pid)
        if popen is not None and popen.poll() is not None:
            return False
        return _start_ticks(child.pid) == child.start_ticks

    def exit_code(self, child: Child) -> int | None:
        """The exit status, when this runner started it and it has ended."""
        popen = self._popens.get(child.pid)
        return None if popen is None else popen.poll()

    async def wait_exit(self, child: Child, timeout: float) -> bool:
        """True once the process has ended; False if it still runs after `timeout` s."""
        deadline = time.monotonic() + timeout
        while self.alive(child):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def stop(self, child: Child, grace: float = 10.0) -> None:
        """SIGTERM its process group, SIGKILL after `grace` s; unregister it once dead."""
        if self.alive(child):
            self._signal(child, signal.SIGTERM)
            if not await self.wait_exit(child, grace):
                self._signal(child, signal.SIGKILL)
                await self.wait_exit(child, 5.0)
        if self.alive(child):
            return
        self._signal(child, signal.SIGKILL)
        self._popens.pop(child.pid, None)
        with contextlib.suppress(FileNotFoundError):
            self._file(child.name).unlink()

    def _signal(self, child: Child, sig: int) -> None:
        """Signal the whole group; the leader's identity is checked first so that a reused
        PID is never signalled (a dead leader's group may still hold its children)."""
        leader_alive = _start_ticks(child.pid) == child.start_ticks
        if not leader_alive and sig != signal.SIGKILL:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    async def stop_all(self, keep: set[str] | None = None) -> None:
        """Stop every registered child not named in `keep`, all at once."""
        keep = keep or set()
        await asyncio.gather(*(self.stop(c) for c in self.all() if c.name not in keep))
