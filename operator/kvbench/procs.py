"""Child processes kvbench starts (workers, routers, the test cluster), stopped by PID.

Every process gets its own session (so stopping it stops its children too) and a
parent-death signal (so a crashed harness does not leave servers behind).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["ManagedProcess", "free_port", "set_parent_death_signal", "tail"]

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now at `host` (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (call in the child)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, or a note that there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One named child process writing stdout and stderr to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=set_parent_death_signal,
            )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it outlives `timeout`."""
        if self.popen is None or self.popen.poll() is not None:
            self._kill_group(signal.SIGKILL)
            return
        self._kill_group(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(signal.SIGKILL)
            self.popen.wait()
        self._kill_group(signal.SIGKILL)

    def _kill_group(self, sig: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def describe_failure(self) -> str:
        """What a developer needs when this process failed: its command, exit and log tail."""
        return (
            f"--- {self.name} (pid {self.popen.pid if self.popen else '-'}, "
            f"exit {self.exit_code()}) ---\n$ {' '.join(self.argv)}\n{tail(self.log_path)}"
        )

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `check()` until true; fail early with the log if the process died."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise RuntimeError(f"{self.name} exited before {what}\n{self.describe_failure()}")
            with contextlib.suppress(Exception):
                if check():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no {what} in {timeout}s\n{self.describe_failure()}"
                )
            time.sleep(0.2)
