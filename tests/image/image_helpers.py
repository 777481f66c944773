"""Programs of a built image run as its container: `docker run`, as kvbench.testing.image says."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from kvbench.testing.image import BuiltImage, docker, run_argv

__all__ = ["ImageRunner", "ImageServer", "RunningContainer"]

_LISTEN = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class ImageRunner:
    """The built `image`, its programs run on demand."""

    def __init__(self, image: BuiltImage) -> None:
        self.image = image

    def argv(
        self,
        args: Sequence[str],
        volumes: Mapping[str, Path] | None = None,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> list[str]:
        return run_argv(self.image, args, volumes, entrypoint, env, name)

    def run(
        self,
        args: Sequence[str],
        volumes: Mapping[str, Path] | None = None,
        entrypoint: Sequence[str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        argv = self.argv(args, volumes, entrypoint)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def python(self, code: str, volumes: Mapping[str, Path] | None = None) -> str:
        """The standard output of the image's Python running `code`; a failure raises."""
        done = self.run(["-c", code], volumes, entrypoint=["python3"])
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


class RunningContainer:
    """A long-running program of the image in a named container, logging to `log`."""

    def __init__(
        self,
        runner: ImageRunner,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = f"kvbench-test-{uuid.uuid4().hex[:10]}"
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                runner.argv(args, env=env, name=self.name),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def pid(self) -> int:
        """The program's PID on this machine (the container's first process: no wrapper)."""
        return int(docker("inspect", "--format", "{{.State.Pid}}", self.name).stdout)

    def status(self) -> dict[str, str]:
        """The program's /proc/PID/status fields."""
        lines = Path(f"/proc/{self.pid()}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def stop(self) -> None:
        subprocess.run(["/usr/bin/docker", "stop", "--time", "10", self.name], capture_output=True)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)


class ImageServer(RunningContainer):
    """`kvbench sim` from the image on an ephemeral loopback port."""

    def __init__(self, runner: ImageRunner, args: Sequence[str], log: Path) -> None:
        super().__init__(runner, ["sim", "--host", "127.0.0.1", "--port", "0", *args], log)
        self.port = self._wait_for_port(60)
        httpx.get(f"{self.url}/health", timeout=10).raise_for_status()

    def _wait_for_port(self, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            match = _LISTEN.search(self.log.read_text(errors="replace"))
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the image's simulator did not start:\n{self.log.read_text()[-3000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
