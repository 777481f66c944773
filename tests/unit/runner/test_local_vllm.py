"""Real vLLM workers of the local back end: the command line (the experiment's vLLM arguments,
nothing of the simulator's), GPUs and environment per worker (a port range of its own, the
defaults a missing package needs), the default server command, what the preflight refuses,
and the CLI's options."""

import asyncio
import copy
import random
import socket
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from kvbench.api import EngineEnvDefault, parse_experiment
from kvbench.cli.run import run
from kvbench.runner.cluster.local import vllm_workers
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.runner.cluster.local.launcher import WorkerSlot
from kvbench.runner.cluster.local.sim_workers import SimLauncher
from kvbench.runner.cluster.local.vllm_workers import (
    PORT_SPAN,
    VllmLauncher,
    VllmOptions,
    VllmPorts,
    default_vllm_command,
)
from kvbench.runner.cluster.local.workers import sim_command

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "prefix-cache-service.yaml"
BASE = yaml.safe_load(EXAMPLE.read_text())
VLLM = ["/usr/bin/true", "serve"]  # an executable, so the command itself is no problem


def _spec(change=None):
    document = copy.deepcopy(BASE)
    document["spec"]["engine"].update(enablePrefixCaching=False, extraArgs=["--enforce-eager-x"])
    document["spec"]["engine"]["env"] = [{"name": "MARK", "value": "engine"}]
    if change is not None:
        change(document["spec"])
    return parse_experiment(document).spec


def _launcher(**options) -> VllmLauncher:
    return VllmLauncher(VllmOptions(command=VLLM, **options))


def _process(launcher, spec, ordinal=0, name="gpu24-0", host="127.0.0.9"):
    slot = WorkerSlot(spec.workers[0], name, ordinal, seed=7)
    return launcher.process(spec, spec.engine, slot, host, 8123)


def test_the_argv_is_the_experiments_vllm_arguments_and_the_host() -> None:
    spec = _spec()
    argv = _process(_launcher(), spec).argv
    assert argv == ["/usr/bin/true", "serve", "Qwen/Qwen3-0.6B", "--port", "8123",
                    "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824",
                    "--gpu-memory-utilization", "0.01", "--no-enable-prefix-caching",
                    "--enable-prompt-tokens-details", "--enforce-eager-x",
                    "--host", "127.0.0.9"]  # fmt: skip
    simulated = sim_command(spec, spec.engine, spec.workers[0], "gpu24-0", "127.0.0.9", 8123, 7)
    assert simulated[5 : 5 + len(argv) - 2] == argv[2:], "the sim's start with the same"
    assert "--profile" in simulated and "--time-scale" in simulated
    assert not {"--profile", "--time-scale", "--worker-id", "--seed"} & set(argv)


def test_machine_options_model_dir_and_extra_args(tmp_path: Path) -> None:
    (tmp_path / "Qwen3-0.6B").mkdir()
    launcher = _launcher(model_dir=tmp_path, extra_args=["--load-format", "dummy"])
    argv = _process(launcher, _spec()).argv
    assert argv[2] == str(tmp_path / "Qwen3-0.6B")
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen3-0.6B"
    assert argv[-2:] == ["--load-format", "dummy"]
    named = _spec(lambda s: s["engine"].update(servedModelName="mine"))
    argv = _process(launcher, named).argv
    assert argv.count("--served-model-name") == 1
    assert argv[argv.index("--served-model-name") + 1] == "mine"
    assert launcher.problems(named) == []


def test_gpus_round_robin_and_the_engine_env(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    spec = _spec()
    spread = _launcher(gpus=["0", "1"])
    assert [_process(spread, spec, i).env["CUDA_VISIBLE_DEVICES"] for i in range(3)] == [
        "0",
        "1",
        "0",
    ]
    inherited = _process(_launcher(), spec).env
    assert inherited["CUDA_VISIBLE_DEVICES"] == "7"
    assert inherited["MARK"] == "engine"


def test_default_command(monkeypatch) -> None:
    util = vllm_workers.importlib.util
    monkeypatch.setattr(util, "find_spec", lambda name: object() if name == "vllm" else None)
    assert default_vllm_command() == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    monkeypatch.setattr(util, "find_spec", lambda name: None)
    monkeypatch.setattr(vllm_workers.shutil, "which", lambda name: f"/opt/bin/{name}")
    assert default_vllm_command() == ["/opt/bin/vllm", "serve"]
    monkeypatch.setattr(vllm_workers.shutil, "which", lambda name: None)
    assert default_vllm_command() is None
    [problem] = VllmLauncher().problems(_spec())
    assert problem.startswith("--engine vllm: vLLM is not installed")
    assert sys.executable in problem


def test_preflight_names_what_real_vllm_cannot_run(tmp_path: Path) -> None:
    def change(spec):
        spec["routing"] += [
            {"name": "dyn", "dynamo": {}},
            {"name": "rr", "router": {"policy": "round_robin"}},
        ]
        spec["workload"]["promptFormat"] = "text"
        spec["engine"]["tensorParallelSize"] = 2
        spec["workers"][0]["simulation"] = {"profile": "no-such-profile"}

    launcher = VllmLauncher(
        VllmOptions(
            command=["no-such-vllm-binary"],
            gpus=["0"],
            model_dir=tmp_path,
            extra_args=[
                *("--max-model-len=2048", "--ho", "127.0.0.1", "--load-format", "dummy"),
                "--kv-events-config={}",
            ],
        )
    )
    problems = [p for p in launcher.problems(_spec(change)) if "vllm-router" not in p]
    heads = sorted(p.split(":")[0] for p in problems)
    assert heads == sorted(
        [
            "spec.routing[1] (dyn).dynamo",
            "--model-dir",
            "spec.engine.tensorParallelSize (2, variant default)",
            "--vllm-arg --max-model-len",
            "--vllm-arg --ho",
            "--vllm-arg --kv-events-config",
            "--vllm-command",
        ]
    ), problems
    assert any("no-such-profile" in p for p in SimLauncher().problems(_spec(change)))


def test_kv_aware_runs_on_real_vllm() -> None:
    """Defect 15: kv_aware was refused because the router's endpoints came from the
    simulator's /version; the back end now tells each worker where to publish."""

    def kv_aware(spec):
        spec["routing"].append({"name": "kv", "router": {"policy": "kv_aware"}})
        spec["workload"]["promptFormat"] = "text"

    assert _launcher().problems(_spec(kv_aware)) == []


def test_workers_started_together_get_disjoint_free_port_ranges() -> None:
    """Defect 14: every worker's vLLM found "a free port" for torch.distributed at once, and
    all but one failed with EADDRINUSE; each now scans its own block from its VLLM_PORT."""
    launcher, spec = _launcher(), _spec()
    bases = [
        int(_process(launcher, spec, i, f"gpu-{i}", f"127.0.0.{i + 2}").env["VLLM_PORT"])
        for i in range(6)
    ]
    blocks = [set(range(base, base + PORT_SPAN)) for base in bases]
    assert sum(map(len, blocks)) == len(set().union(*blocks)), f"blocks overlap: {bases}"
    assert all(base >= 20000 and base + PORT_SPAN <= 32768 for base in bases), bases
    again = int(_process(launcher, spec, 0, "gpu-0", "127.0.0.20").env["VLLM_PORT"])
    assert not set(range(again, again + PORT_SPAN)) & set().union(*blocks[1:])


def test_a_block_with_a_port_in_use_is_skipped() -> None:
    first = VllmPorts(random.Random(5)).take()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("", first + PORT_SPAN - 1))
        assert VllmPorts(random.Random(5)).take() != first


def test_defaults_a_missing_package_needs_are_set_and_named(monkeypatch) -> None:
    """Defect 13: vLLM's sampler imports flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0, and
    every worker failed where it is not installed. What kvbench set is named with why, apart
    from the image (the version the server reports, alone)."""
    util = vllm_workers.importlib.util
    found, flashinfer = util.find_spec, [None]
    monkeypatch.setattr(
        util, "find_spec", lambda name: flashinfer[0] if name == "flashinfer" else found(name)
    )
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    launcher, spec = _launcher(), _spec()
    good = _process(launcher, spec, 0, "a", "good")
    assert good.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert good.env_defaults == {
        "VLLM_USE_FLASHINFER_SAMPLER": EngineEnvDefault(
            value="0", reason="flashinfer is not installed"
        )
    }
    own = _spec(lambda s: s["engine"]["env"].append({"name": "VLLM_USE_FLASHINFER_SAMPLER",
                                                     "value": "1"}))  # fmt: skip
    engine = _process(launcher, own, 0, "b", "engine")
    assert engine.env["VLLM_USE_FLASHINFER_SAMPLER"] == "1" and engine.env_defaults == {}
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    user = _process(launcher, spec, 0, "c", "user")
    assert user.env["VLLM_USE_FLASHINFER_SAMPLER"] == "1" and user.env_defaults == {}
    flashinfer[0] = object()
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    old = _process(launcher, spec, 0, "d", "old")
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in old.env and old.env_defaults == {}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"version": "0.25.0"})

    async def images() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            hosts = ("good", "engine", "user", "old")
            return [await launcher.image(client, f"http://{h}:8123") for h in hosts]

    assert asyncio.run(images()) == ["vllm 0.25.0"] * 4, "the version alone, defaults or not"


def test_options_refuse_empty_words() -> None:
    with pytest.raises(ValueError, match="no empty ones"):
        VllmOptions(gpus=["0", ""])
    with pytest.raises(ValueError, match="at least one word"):
        VllmOptions(command=[])


def test_the_cluster_runs_real_vllm_on_the_wall_clock(tmp_path: Path) -> None:
    assert LocalCluster(tmp_path, launcher=_launcher()).uses_simulator(_spec()) is False
    assert LocalCluster(tmp_path).uses_simulator(_spec()) is True
    (tmp_path / "engine").write_text("sim\n")
    [mixed] = LocalCluster(tmp_path, launcher=_launcher()).problems(_spec())
    assert "has run --engine sim workers" in mixed
    assert LocalCluster(tmp_path).problems(_spec()) == []


def test_the_image_is_vllm_and_its_version() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version" and request.url.host == "good":
            return httpx.Response(200, json={"version": "0.25.0"})
        return httpx.Response(404)

    async def images() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return [await _launcher().image(client, f"http://{h}") for h in ("good", "old")]

    assert asyncio.run(images()) == ["vllm 0.25.0", "vllm (version unknown)"]


def test_cli_options(tmp_path: Path, monkeypatch) -> None:
    runner = CliRunner()
    sim = runner.invoke(run, [str(EXAMPLE), "--out", str(tmp_path / "a"), "--gpus", "0"])
    assert sim.exit_code == 2 and "--gpus: only with --engine vllm" in sim.output
    monkeypatch.setattr(vllm_workers, "default_vllm_command", lambda: None)
    real = runner.invoke(run, [str(EXAMPLE), "--out", str(tmp_path / "b"), "--engine", "vllm"])
    assert real.exit_code == 1 and "vLLM is not installed" in real.output, real.output
    assert not (tmp_path / "b").exists(), "refused before anything was written"
    bad = runner.invoke(run, [str(EXAMPLE), "--engine", "vllm", "--vllm-command", " "])
    assert bad.exit_code == 2 and "--vllm-command: " in bad.output, bad.output
