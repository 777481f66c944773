"""Long waits say what they wait for: a lock another process holds (its PID, how long, how
far its work got), and a long build (its steps and, now and then, its last line)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from kvbench.testing.longwaits import exclusive, run_logged
from kvbench.testing.wait import wait_for

_HOLDER = """
import sys, time
from pathlib import Path
from kvbench.testing.longwaits import exclusive
lock, log, release = map(Path, sys.argv[1:4])
with exclusive(lock, "Kubernetes build", say=lambda _: None):
    log.write_text("build-test-cluster: fetching\\ncompiling cmd/kube-apiserver\\n")
    while not release.exists():
        time.sleep(0.05)
"""


def test_a_wait_for_a_held_lock_names_the_holder_and_how_far_it_got(tmp_path: Path) -> None:
    lock, log, release = tmp_path / ".build.lock", tmp_path / "build.log", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock), str(log), str(release)])
    said: list[str] = []
    try:
        wait_for(lambda: log.exists(), 30, "the holder to take the lock")

        def wait() -> None:
            with exclusive(lock, "Kubernetes build", said.append, progress=log, interval=0.3):
                said.append(f"held; the file says {lock.read_text().strip()}")

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_for(lambda: len(said) >= 3, 30, "two progress lines")
        release.touch()
        waiter.join(timeout=30)
    finally:
        release.touch()
        holder.wait(timeout=30)
    assert said[0] == f"waiting for the Kubernetes build lock held by PID {holder.pid}"
    assert said[1].startswith(
        f"still waiting for the Kubernetes build lock held by PID {holder.pid} ("
    )
    assert said[1].endswith("s); it is at: compiling cmd/kube-apiserver")
    assert said[-2].startswith("got the Kubernetes build lock after ")
    assert said[-1] == f"held; the file says {os.getpid()}"


def test_a_long_build_says_its_steps_and_its_last_line(tmp_path: Path) -> None:
    script = (
        'echo "build-test-cluster: fetching the source"; echo "noise"; sleep 1;'
        'echo "compiling cmd/kubectl" >&2; sleep 1; echo "build-test-cluster: built"; exit 3'
    )
    said: list[str] = []
    log = tmp_path / "build.log"
    code = run_logged(
        ["bash", "-c", script], {"PATH": "/usr/bin:/bin"}, log, "building", "build-test-cluster: ",
        said.append, interval=0.4,
    )  # fmt: skip
    assert code == 3
    assert said[0] == f"building (its output: {log})"
    assert [s for s in said if not s.startswith("building")] == ["fetching the source", "built"]
    progress = [s for s in said if "so far; last: " in s]
    assert progress and progress[-1].endswith("so far; last: compiling cmd/kubectl")
    assert said[-1].startswith("building: failed (3) in ")
    assert log.read_text().splitlines() == [
        "build-test-cluster: fetching the source",
        "noise",
        "compiling cmd/kubectl",
        "build-test-cluster: built",
    ]
