"""Real vLLM as the local back end's workers (`kvbench run --engine vllm`): one GPU machine, the
same experiment file, no Kubernetes.

A worker is `vllm serve` with exactly the experiment's arguments (`EngineSpec.vllm_args()`,
what the simulator gets minus its own flags) and `--host` its loopback address, the engine's
environment, and `CUDA_VISIBLE_DEVICES` when `--gpus` spreads workers over GPUs. The load
generator runs on the wall clock. What belongs to the machine, not to the experiment, is
`VllmOptions`: the server's command, the GPUs, and for a machine without the Hub a directory
of local model copies plus extra flags (`--load-format dummy` over a config and a tokenizer).

Two things workers on one machine need that a pod does not: a port range of its own (vLLM
opens ports besides --port, torch.distributed's store even on one GPU, from `VLLM_PORT` up or
wherever the kernel says, and workers started together would race for them: `VllmPorts`),
and the defaults a missing optional package needs (`missing_package_defaults`), which each
worker's record names (`engineEnvDefaults`, beside its image, which is vLLM's version alone).
"""

import importlib.util
import random
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvbench.api import EngineEnvDefault, EngineSpec, ExperimentSpec
from kvbench.runner.cluster.local.launcher import WorkerLauncher, WorkerProcess, WorkerSlot
from kvbench.runner.cluster.local.preflight import shared_problems
from kvbench.runner.cluster.local.workers import engine_env

__all__ = [
    "VllmLauncher",
    "VllmOptions",
    "VllmPorts",
    "default_vllm_command",
    "local_model",
    "missing_package_defaults",
]

PORT_SPAN = 16
"""Ports per worker from its VLLM_PORT up: vLLM takes the first free one from there for each
port it opens (one for a single GPU's torch.distributed store, more with parallelism)."""
_PORT_WINDOW = range(20000, 32768)
"""Below Linux's ephemeral ports (32768-60999 by default), which the kernel hands out to
`free_port` and to connections: none of those lands in a block after it was found free."""


def default_vllm_command() -> list[str] | None:
    """vLLM's CLI in this interpreter when it has vLLM, else `vllm` on PATH (None: neither).

    Only looked up, never imported: importing vLLM loads torch, seconds before any check."""
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    found = shutil.which("vllm")
    return [found, "serve"] if found is not None else None


def local_model(model_dir: Path, model: str) -> Path:
    """Where `--model-dir` keeps `model`: its last path component (Qwen/Qwen3-0.6B ->
    DIR/Qwen3-0.6B), as `huggingface-cli download --local-dir` lays models out."""
    return model_dir / model.rstrip("/").rsplit("/", 1)[-1]


class VllmOptions(BaseModel):
    """How this machine runs `vllm serve`: nothing here changes what the experiment means."""

    model_config = ConfigDict(frozen=True)

    command: list[str] | None = Field(
        None, description="The server's command up to its arguments (default: found here)"
    )
    gpus: list[str] | None = Field(
        None, description="CUDA_VISIBLE_DEVICES per worker, round-robin (None: inherited)"
    )
    model_dir: Path | None = Field(
        None, description="Serve local copies of the models, under their own names"
    )
    extra_args: list[str] = Field(
        default_factory=list, description="More `vllm serve` flags of this machine"
    )

    @field_validator("command", "gpus")
    @classmethod
    def _no_empty_words(cls, words: list[str] | None) -> list[str] | None:
        if words is not None and (not words or not all(w.strip() for w in words)):
            raise ValueError("give at least one word, and no empty ones")
        return words


def missing_package_defaults(env: Mapping[str, str]) -> dict[str, EngineEnvDefault]:
    """What vLLM needs set when an optional package it would import is not installed here
    (as `bench/real_vs_sim.py` sets it), with why, unless `env` sets it already: its sampler
    imports flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0, and fails every start without it."""
    defaults = {}
    if importlib.util.find_spec("flashinfer") is None:
        defaults["VLLM_USE_FLASHINFER_SAMPLER"] = EngineEnvDefault(
            value="0", reason="flashinfer is not installed"
        )
    return {name: value for name, value in defaults.items() if name not in env}


def _port_free(port: int) -> bool:
    """Whether `port` can be bound on every address, as vLLM binds its ports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


class VllmPorts:
    """A VLLM_PORT per worker whose block of `PORT_SPAN` ports was free when handed out, taken
    in turn from a ring of blocks, so that workers started together never pick the same port
    (vLLM finds a port free, lets it go, and binds it later). A block comes round again only
    after every other one, when its worker has long bound its ports, or is gone."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._bases = range(_PORT_WINDOW.start, _PORT_WINDOW.stop - PORT_SPAN + 1, PORT_SPAN)
        # A random first block: two runners on one machine rarely try the same blocks.
        self._next = (rng or random.Random()).randrange(len(self._bases))

    def take(self) -> int:
        """The base of the next block whose ports are all free."""
        for _ in self._bases:
            base = self._bases[self._next]
            self._next = (self._next + 1) % len(self._bases)
            if all(_port_free(port) for port in range(base, base + PORT_SPAN)):
                return base
        raise RuntimeError(
            f"no {PORT_SPAN} free ports in a row between {_PORT_WINDOW.start} and "
            f"{_PORT_WINDOW.stop - 1} for a worker's VLLM_PORT"
        )


def _flag(arg: str) -> str:
    """`--no-enable-x=...` -> `--enable-x`: the setting a flag names, either spelling."""
    name = arg.split("=", 1)[0]
    return "--" + name.removeprefix("--").removeprefix("no-")


class VllmLauncher(WorkerLauncher):
    """`vllm serve` workers on the wall clock."""

    engine = "vllm"
    simulated = False
    warm_first = True

    def __init__(self, options: VllmOptions | None = None) -> None:
        self.options = options or VllmOptions()
        self.command = self.options.command or default_vllm_command()
        self.ports = VllmPorts()

    def problems(self, spec: ExperimentSpec) -> list[str]:
        problems = shared_problems(spec)
        for i, arm in enumerate(spec.routing):
            where = f"spec.routing[{i}] ({arm.name})"
            if arm.dynamo is not None:
                problems.append(
                    f"{where}.dynamo: a Dynamo arm runs Dynamo's own workers (dynamo.mocker), "
                    "not vLLM: drop the arm, or run with --engine sim"
                )
        for variant, engine in spec.engines().items():
            problems += self._engine_problems(variant, engine)
        problems += self._command_problems()
        return problems

    def _engine_problems(self, variant: str, engine: EngineSpec) -> list[str]:
        problems = []
        if self.options.model_dir is not None:
            path = local_model(self.options.model_dir, engine.model)
            if not path.is_dir():
                problems.append(
                    f"--model-dir: no directory {path} for spec.engine.model {engine.model} "
                    f"(variant {variant})"
                )
        if self.options.gpus is not None and (engine.tensor_parallel_size or 1) > 1:
            problems.append(
                f"spec.engine.tensorParallelSize ({engine.tensor_parallel_size}, variant "
                f"{variant}): --gpus gives each worker one GPU; leave it out to let the "
                "workers see every GPU"
            )
        own = {
            _flag(a)
            for a in [*engine.vllm_args()[1:], "--host", "--kv-events-config"]
            if a.startswith("--")
        }
        if self.options.model_dir is not None:
            own.add("--served-model-name")
        for arg in self.options.extra_args:
            flag = _flag(arg)
            if arg.startswith("--") and len(flag) > 2 and any(o.startswith(flag) for o in own):
                problems.append(
                    f"--vllm-arg {arg.split('=', 1)[0]}: kvbench or the experiment (variant "
                    f"{variant}) sets it already; change the experiment instead"
                )
        return problems

    def _command_problems(self) -> list[str]:
        if self.command is None:
            return [
                f"--engine vllm: vLLM is not installed: `import vllm` fails in {sys.executable} "
                "and no `vllm` is on PATH; install it, or give the server with --vllm-command"
            ]
        if shutil.which(self.command[0]) is None:
            return [f"--vllm-command: {self.command[0]} is not an executable here"]
        return []

    def process(
        self, spec: ExperimentSpec, engine: EngineSpec, slot: WorkerSlot, host: str, port: int
    ) -> WorkerProcess:
        if self.command is None:
            raise RuntimeError("vLLM is not installed (the preflight says so before any start)")
        model, *args = engine.model_copy(update={"port": port}).vllm_args()
        if self.options.model_dir is not None:
            model = str(local_model(self.options.model_dir, engine.model))
            if engine.served_model_name is None:
                args += ["--served-model-name", engine.model]
        argv = [*self.command, model, *args, "--host", host, *self.options.extra_args]
        env = engine_env(engine)
        defaults = missing_package_defaults(env)
        env |= {name: default.value for name, default in defaults.items()}
        env["VLLM_PORT"] = str(self.ports.take())
        if self.options.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.options.gpus[slot.ordinal % len(self.options.gpus)]
        return WorkerProcess(argv=argv, env=env, env_defaults=defaults)

    async def image(self, client: httpx.AsyncClient, base_url: str) -> str:
        """`vllm <version>` from the server's /version (the defaults kvbench gave it are the
        record's `engineEnvDefaults`, never part of what the server is)."""
        try:
            response = await client.get(f"{base_url}/version", timeout=5.0)
            version = response.json().get("version") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            version = None
        return f"vllm {version or '(version unknown)'}"
