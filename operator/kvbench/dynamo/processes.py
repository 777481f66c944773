"""Start and stop a Dynamo deployment on loopback: N `dynamo.mocker` workers behind one
`dynamo.frontend` with a router mode.

Each process runs as a `ManagedProcess` (own session, parent-death signal, log file) in
the deployment's scratch directory, which also holds the file discovery store. Ports come
from the kernel: workers bind their system status server to port 0 and log the port they
got; the frontend is given a port the kernel just handed out (it does not log the port it
binds), and is restarted on another if that one was taken in between. `start()` returns
once every worker serves `/metrics` with its instance id, every instance is in the
discovery store, and the frontend lists the model on `/v1/models`; `stop()` (also on
failure and on Ctrl-C, through the context manager) stops the frontend and the workers by
their process groups.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from kvbench.dynamo.environment import dynamo_env, registered_instance_ids
from kvbench.dynamo.metrics import scrape_worker
from kvbench.procs import ManagedProcess, free_port

__all__ = [
    "DeploymentSpec",
    "DynamoDeployment",
    "MockerOptions",
    "RouterMode",
    "RouterOptions",
    "WorkerEndpoint",
]

RouterMode = Literal["kv", "random", "round-robin"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SYSTEM_PORT = re.compile(r"system status server bound to: [0-9.]+:(\d+)")
_PORT_TAKEN = ("Address already in use", "AddrInUse")
_FRONTEND_TRIES = 3


def _system_port(proc: ManagedProcess) -> int | None:
    """The port a worker's system status server bound, once its log says it."""
    match = _SYSTEM_PORT.search(_ANSI.sub("", proc.log_path.read_text(errors="replace")))
    return int(match.group(1)) if match else None


class MockerOptions(BaseModel):
    """Engine settings of every `dynamo.mocker` worker (vLLM-style flags)."""

    model_config = ConfigDict(frozen=True)

    block_size: int = Field(16, ge=1)
    num_gpu_blocks: int = Field(description="--num-gpu-blocks-override: KV blocks per worker")
    speedup_ratio: float = Field(1.0, ge=0, description="0 means no simulated delays")
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool = True

    def argv(self) -> list[str]:
        args = [
            "--block-size",
            str(self.block_size),
            "--num-gpu-blocks-override",
            str(self.num_gpu_blocks),
            "--speedup-ratio",
            str(self.speedup_ratio),
        ]
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if not self.enable_prefix_caching:
            args.append("--no-enable-prefix-caching")
        return args


class RouterOptions(BaseModel):
    """The frontend's router: mode, and the KV router's cost weights (kv mode only).

    Dynamo 1.6.1's KV router picks the worker with the lowest cost
    `prefill_load_scale * (prompt blocks - overlap_score_credit * cached blocks) +
    decode blocks`, sampled by softmax at `temperature` (0: deterministic). Unset values
    keep Dynamo's defaults (1.0, 1.0, 0.0, KV events on). These flags are deprecated in
    1.6 in favour of `--router-policy-config` and still honoured.
    """

    model_config = ConfigDict(frozen=True)

    mode: RouterMode = "kv"
    overlap_score_credit: float | None = Field(None, ge=0)
    prefill_load_scale: float | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0)
    kv_events: bool | None = Field(
        None, description="False: predict caches from routing decisions, not worker events"
    )

    def argv(self) -> list[str]:
        args = ["--router-mode", self.mode]
        if self.mode != "kv":
            return args
        if self.overlap_score_credit is not None:
            args += ["--router-kv-overlap-score-credit", str(self.overlap_score_credit)]
        if self.prefill_load_scale is not None:
            args += ["--router-prefill-load-scale", str(self.prefill_load_scale)]
        if self.temperature is not None:
            args += ["--router-temperature", str(self.temperature)]
        if self.kv_events is not None:
            args.append("--router-kv-events" if self.kv_events else "--no-router-kv-events")
        return args


class DeploymentSpec(BaseModel):
    """One deployment: the model directory, the workers and the router."""

    model_config = ConfigDict(frozen=True)

    model_path: Path
    model_name: str = "qwen3-mock"
    workers: int = Field(2, ge=1)
    mocker: MockerOptions
    router: RouterOptions = RouterOptions()
    host: str = "127.0.0.1"
    python: str = Field(sys.executable, description="Interpreter with ai-dynamo installed")
    startup_timeout: float = Field(90.0, gt=0)
    stop_timeout: float = Field(10.0, gt=0)


class WorkerEndpoint(BaseModel):
    """A running worker: its Dynamo instance id and where its counters are."""

    model_config = ConfigDict(frozen=True)

    index: int
    pid: int
    instance_id: int
    metrics_url: str
    log_path: Path
    startup_seconds: float = Field(
        ge=0,
        description="From launching this worker to it serving /metrics with its instance id "
        "and being in the discovery store (the frontend starts after all workers are)",
    )


class DynamoDeployment:
    """Frontend + mocker workers of one `DeploymentSpec`, in `scratch` (created if needed)."""

    def __init__(self, spec: DeploymentSpec, scratch: Path) -> None:
        self.spec = spec
        self.scratch = scratch
        self.workers: list[WorkerEndpoint] = []
        self.base_url = ""
        self._worker_procs: list[ManagedProcess] = []
        self._frontend: ManagedProcess | None = None

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process started (frontend first), running or not."""
        return ([self._frontend] if self._frontend else []) + self._worker_procs

    def __enter__(self) -> DynamoDeployment:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the workers, then the frontend; wait until all are ready. Stops all on failure."""
        try:
            self._start_workers()
            self._start_frontend()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the frontend, then every worker (SIGTERM to the group, SIGKILL after a timeout)."""
        for proc in self.processes:
            proc.stop(self.spec.stop_timeout)

    def _env(self, system_port: int | None) -> dict[str, str]:
        extra = {"DYN_SYSTEM_PORT": str(system_port)} if system_port is not None else None
        return dynamo_env(self.scratch, self.spec.host, extra)

    def _start_workers(self) -> None:
        spec = self.spec
        started: list[float] = []
        for index in range(spec.workers):
            argv = [
                spec.python,
                "-m",
                "dynamo.mocker",
                "--discovery-backend",
                "file",
                "--model-path",
                str(spec.model_path),
                "--model-name",
                spec.model_name,
                *spec.mocker.argv(),
            ]
            proc = ManagedProcess(
                f"mocker-{index}",
                argv,
                self.scratch / "logs" / f"mocker-{index}.log",
                env=self._env(system_port=0),
                cwd=self.scratch,
            )
            self._worker_procs.append(proc)
            proc.start()
            started.append(time.monotonic())
        self.workers = self._wait_workers(started)

    def _wait_workers(self, started: list[float]) -> list[WorkerEndpoint]:
        """Poll every worker until each is ready, timing each from its own launch.

        Ready means serving `/metrics` with its instance id and registered in the discovery
        store. The workers are polled together, so a slow one does not delay another's time.
        """
        what = "serving /metrics with its instance id, in the discovery store"
        procs = self._worker_procs
        deadline = time.monotonic() + self.spec.startup_timeout
        ports: dict[int, int] = {}
        ready: dict[int, WorkerEndpoint] = {}
        while True:
            registered = registered_instance_ids(self.scratch)
            for index, proc in enumerate(procs):
                if index in ready:
                    continue
                if not proc.running():
                    raise RuntimeError(
                        f"{proc.name} exited before {what}\n{proc.describe_failure()}"
                    )
                if index not in ports and (port := _system_port(proc)) is not None:
                    ports[index] = port
                instance_id = self._instance_id(ports[index]) if index in ports else None
                if instance_id is not None and instance_id in registered:
                    ready[index] = WorkerEndpoint(
                        index=index,
                        pid=proc.pid,
                        instance_id=instance_id,
                        metrics_url=self._metrics_url(ports[index]),
                        log_path=proc.log_path,
                        startup_seconds=round(time.monotonic() - started[index], 3),
                    )
            if len(ready) == len(procs):
                return [ready[index] for index in range(len(procs))]
            if time.monotonic() > deadline:
                late = next(proc for index, proc in enumerate(procs) if index not in ready)
                raise TimeoutError(
                    f"{late.name}: not {what} in {self.spec.startup_timeout}s\n"
                    f"{late.describe_failure()}"
                )
            time.sleep(0.1)

    def _instance_id(self, port: int) -> int | None:
        """The instance id on the worker's `/metrics`, None until it serves one."""
        try:
            return scrape_worker(self._metrics_url(port), timeout=2.0).instance_id
        except httpx.HTTPError:
            return None

    def _metrics_url(self, port: int) -> str:
        return f"http://{self.spec.host}:{port}/metrics"

    def _start_frontend(self) -> None:
        spec = self.spec
        for attempt in range(_FRONTEND_TRIES):
            port = free_port(spec.host)
            argv = [
                spec.python,
                "-m",
                "dynamo.frontend",
                "--discovery-backend",
                "file",
                "--kv-cache-block-size",
                str(spec.mocker.block_size),
                "--http-host",
                spec.host,
                "--http-port",
                str(port),
                "--router-min-initial-workers",
                str(spec.workers),
                *spec.router.argv(),
            ]
            self._frontend = ManagedProcess(
                "frontend",
                argv,
                self.scratch / "logs" / f"frontend-{attempt}.log",
                env=self._env(system_port=None),
                cwd=self.scratch,
            )
            self._frontend.start()
            self.base_url = f"http://{spec.host}:{port}"
            try:
                self._frontend.wait_until(
                    self._model_listed, spec.startup_timeout, f"model {spec.model_name} listed"
                )
                return
            except RuntimeError:
                log = self._frontend.log_path.read_text(errors="replace")
                if attempt + 1 == _FRONTEND_TRIES or not any(m in log for m in _PORT_TAKEN):
                    raise
                self._frontend.stop(spec.stop_timeout)

    def _model_listed(self) -> bool:
        response = httpx.get(f"{self.base_url}/v1/models", timeout=2.0)
        response.raise_for_status()
        return any(model["id"] == self.spec.model_name for model in response.json()["data"])

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until no worker has a request in flight (after a measured window)."""
        deadline = time.monotonic() + timeout
        while any(scrape_worker(w.metrics_url).inflight_requests for w in self.workers):
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers still busy after {timeout}s")
            time.sleep(0.1)
