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
        for index, proc in enumerate(self._worker_procs):
            self.workers.append(self._wait_worker(index, proc))
        ids = {worker.instance_id for worker in self.workers}
        first = self._worker_procs[0]
        first.wait_until(
            lambda: ids <= registered_instance_ids(self.scratch),
            spec.startup_timeout,
            f"all {spec.workers} workers in the discovery store",
        )

    def _wait_worker(self, index: int, proc: ManagedProcess) -> WorkerEndpoint:
        found: dict[str, int] = {}

        def ready() -> bool:
            if "port" not in found:
                log = _ANSI.sub("", proc.log_path.read_text(errors="replace"))
                match = _SYSTEM_PORT.search(log)
                if match is None:
                    return False
                found["port"] = int(match.group(1))
            counters = scrape_worker(self._metrics_url(found["port"]))
            if counters.instance_id is None:
                return False
            found["instance_id"] = counters.instance_id
            return True

        proc.wait_until(ready, self.spec.startup_timeout, "serving /metrics with its instance id")
        return WorkerEndpoint(
            index=index,
            pid=proc.pid,
            instance_id=found["instance_id"],
            metrics_url=self._metrics_url(found["port"]),
            log_path=proc.log_path,
        )

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
