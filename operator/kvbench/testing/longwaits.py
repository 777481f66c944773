"""Long waits of the test cluster say what they wait for: a machine-wide lock another
process holds (who, for how long, how far its work got), a build that takes minutes.

A test session once sat silent for 9.5 minutes on the Kubernetes build lock while another
session built. Every wait here speaks through a `Say` (stderr by default; the test suite
passes one that reaches the terminal past pytest's capture).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

__all__ = ["PROGRESS_INTERVAL", "Say", "exclusive", "run_logged", "say_on_stderr"]

Say = Callable[[str], None]
PROGRESS_INTERVAL = 30.0
"""Seconds between two progress lines of one wait."""


def say_on_stderr(message: str) -> None:
    print(f"kvbench test cluster: {message}", file=sys.stderr, flush=True)


def _last_line(path: Path | None) -> str:
    """The last non-empty line of a progress log (empty when there is none)."""
    if path is None:
        return ""
    with contextlib.suppress(OSError):
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            lines = [line.strip() for line in log.read().decode(errors="replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")
    return ""


def _holder(lock: IO[str]) -> str:
    """Who holds the lock, as its holder wrote it: `PID N`."""
    lock.seek(0)
    pid = lock.read().strip()
    return f"PID {pid}" if pid.isdigit() else "another process"


def _wait(lock: IO[str], what: str, say: Say, progress: Path | None, interval: float) -> None:
    holder, began = _holder(lock), time.monotonic()
    say(f"waiting for the {what} lock held by {holder}")
    next_word = began + interval
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(min(1.0, interval))
        if time.monotonic() >= next_word:
            next_word += interval
            last = _last_line(progress)
            say(
                f"still waiting for the {what} lock held by {holder} "
                f"({time.monotonic() - began:.0f}s)" + (f"; it is at: {last}" if last else "")
            )
    say(f"got the {what} lock after {time.monotonic() - began:.0f}s")


@contextlib.contextmanager
def exclusive(
    path: Path,
    what: str,
    say: Say = say_on_stderr,
    progress: Path | None = None,
    interval: float = PROGRESS_INTERVAL,
) -> Iterator[None]:
    """Hold the flock of `path` for the block. While another process holds it, say who
    (the holder writes its PID into the file) and, every `interval` seconds, how long the
    wait has lasted and the last line of the holder's `progress` log."""
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait(lock, what, say, progress, interval)
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def _copy(stream: IO[str], log: IO[str], steps: str, say: Say, last: list[str]) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        if line.strip():
            last[0] = line.strip()
        if line.startswith(steps):
            say(line[len(steps) :].strip())


def run_logged(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    what: str,
    steps: str,
    say: Say = say_on_stderr,
    interval: float = PROGRESS_INTERVAL,
) -> int:
    """Run a long command with its output in `log_path` (where a waiter reads how far it
    got); say each of its lines that starts with `steps`, and every `interval` seconds how
    long it has run and its last line. Returns its exit code."""
    began = time.monotonic()
    say(f"{what} (its output: {log_path})")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        last = [""]
        copier = threading.Thread(
            target=_copy, args=(process.stdout, log, steps, say, last), daemon=True
        )
        copier.start()
        while True:
            try:
                code = process.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                say(f"{what}: {time.monotonic() - began:.0f}s so far; last: {last[0]}")
        copier.join()
    say(f"{what}: {'done' if code == 0 else f'failed ({code})'} in {time.monotonic() - began:.0f}s")
    return code
