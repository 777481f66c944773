"""The local back end's children: processes that outlive the runner, registered on disk.

Like pods on a cluster, local workers, arms and load generators keep running when the runner
that started them is killed, so the next runner can adopt a load still under way. Each is
written to `children/<name>.json` the moment it is spawned and removed only once it is dead,
so nothing started is ever forgotten: an interrupted stop is finished by the next teardown.
A process is identified by PID and kernel start time, so a reused PID is never mistaken for it.
A worker's entry also says where it publishes KV events, as the back end configured it, so a
later runner that adopts the worker can still subscribe a `kv_aware` router to it.
"""

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

__all__ = ["Child", "ChildKind", "KvEventSource", "LocalChildren", "log_excerpt"]

ChildKind = Literal["worker", "arm", "load"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PROGRESS_BAR = re.compile(r"\d+%\|")
"""tqdm's bars (`Loading safetensors shards:  45%|████▌     | 5/11 [...]`), redrawn with \\r."""
_EXCEPTION = re.compile(r"\b\w*(?:Error|Exception): ")
"""A traceback's last line (`ModuleNotFoundError: No module named 'flashinfer'`), also where a
log prefix precedes it, as vLLM's does on every line."""
_TAIL_BYTES = 256 * 1024
"""How much of a log's end is read: a traceback fits, a long run's log is not read whole."""


def log_excerpt(text: str, lines: int) -> str:
    """The last `lines` lines worth quoting (colours removed, blank lines and progress bars
    dropped), after the exceptions further up: vLLM's API server ends its log with its own
    traceback ("Engine core initialization failed. See root cause above"), under the engine's."""
    kept = []
    for line in _ANSI.sub("", text).replace("\r", "\n").splitlines():
        if line.strip() and not _PROGRESS_BAR.search(line):
            kept.append(line.rstrip())
    last = kept[-lines:]
    earlier = list(dict.fromkeys(line for line in kept[:-lines] if _EXCEPTION.search(line)))
    if not earlier:
        return "\n".join(last)
    return "\n".join(["exceptions further up:", *earlier[-5:], "last lines:", *last])


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


class KvEventSource(BaseModel):
    """Where a worker publishes vLLM KV events: it binds `tcp://*:port` (vLLM's publisher binds
    an endpoint with `*` and connects to any other), a subscriber connects to `endpoint`."""

    host: str
    port: int
    block_size: int
    model: str
    """The served model name, which the subscriber's cache keys carry."""

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def bind_endpoint(self) -> str:
        return f"tcp://*:{self.port}"


class Child(BaseModel):
    """One registered process."""

    name: str
    kind: ChildKind
    pid: int
    start_ticks: int
    uid: str
    log: str
    owner: str | None = None
    kv_events: KvEventSource | None = None

    @property
    def log_path(self) -> Path:
        return Path(self.log)

    def log_tail(self, lines: int = 30) -> str:
        """The log's last meaningful lines (`log_excerpt`), or why there are none."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - _TAIL_BYTES))
                text = log.read().decode(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log})"
        if not text.strip():
            return "(the log is empty)"
        return log_excerpt(text, lines) or "(the log holds only blank lines and progress bars)"


class LocalChildren:
    """The registry of one results directory's local processes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._popens: dict[str, subprocess.Popen[bytes]] = {}
        """The processes this runner started, by their child's uid (a PID may be reused)."""

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
        kv_events: KvEventSource | None = None,
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
        ticks = _start_ticks(popen.pid)
        child = Child(
            name=name,
            kind=kind,
            pid=popen.pid,
            start_ticks=ticks if ticks is not None else -1,
            uid=str(uuid.uuid4()),
            log=str(log_path),
            owner=owner,
            kv_events=kv_events,
        )
        self._popens[child.uid] = popen
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
        """Whether it still runs. One this runner started runs until it is reaped: its PID reads
        as a zombie once its main thread has ended, while its other threads (vLLM's) may still
        run and write its log, and only then is its exit status known."""
        popen = self._popens.get(child.uid)
        if popen is not None:
            return popen.poll() is None
        return _start_ticks(child.pid) == child.start_ticks

    def exit_code(self, child: Child) -> int | None:
        """The exit status, when this runner started it and it has ended."""
        popen = self._popens.get(child.uid)
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
        self._popens.pop(child.uid, None)
        with contextlib.suppress(FileNotFoundError):
            self._file(child.name).unlink()

    def _signal(self, child: Child, sig: int) -> None:
        """Signal the whole group; the leader's identity is checked first so that a reused
        PID is never signalled (a dead leader's group may still hold its children; the PID of
        one not yet reaped cannot be reused)."""
        if not self.alive(child) and sig != signal.SIGKILL:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    async def stop_all(self, keep: set[str] | None = None) -> None:
        """Stop every registered child not named in `keep`, all at once."""
        keep = keep or set()
        await asyncio.gather(*(self.stop(c) for c in self.all() if c.name not in keep))
