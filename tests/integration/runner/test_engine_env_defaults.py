"""A `--engine vllm` worker that kvbench set a variable on (VLLM_USE_FLASHINFER_SAMPLER=0,
flashinfer missing) carries it, with why, in its own field of the worker, and its image is
the version the server reports, alone (the fake `vllm serve` of test_real_vllm_backend.py)."""

import asyncio
import json
import sys
from pathlib import Path

import yaml

from kvbench.api import Cleanup, EngineEnvDefault, parse_experiment
from kvbench.runner.cluster import ChildNames
from kvbench.runner.cluster.local import vllm_workers
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.runner.cluster.local.vllm_workers import VllmLauncher, VllmOptions

ROOT = Path(__file__).resolve().parents[3]
FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")


def test_the_worker_names_what_kvbench_set_apart_from_its_image(tmp_path, monkeypatch) -> None:
    """The bug: the default rode in the image string (`vllm X (kvbench set ...)`), which the
    report prints as the engine that ran."""
    util = vllm_workers.importlib.util
    found = util.find_spec
    monkeypatch.setattr(
        util, "find_spec", lambda name: None if name == "flashinfer" else found(name)
    )
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["workers"] = [{"name": "gpu", "replicas": 1}]
    spec = parse_experiment(document).spec
    starts = tmp_path / "starts"
    command = [sys.executable, str(FAKE_VLLM), str(starts), "serve"]
    cluster = LocalCluster(tmp_path / "work", launcher=VllmLauncher(VllmOptions(command=command)))
    names = ChildNames(experiment="defaults", index=0, attempt=1)

    async def scenario():
        try:
            return await cluster.start_workers(spec, "default", spec.engine, spec.routing[0], names)
        finally:
            await cluster.teardown(Cleanup())

    [worker] = asyncio.run(scenario())
    [start] = [json.loads(p.read_text()) for p in starts.glob("*.json")]
    assert start["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0", "set on the server"
    assert worker.engine_env_defaults == {
        "VLLM_USE_FLASHINFER_SAMPLER": EngineEnvDefault(
            value="0", reason="flashinfer is not installed"
        )
    }
    assert worker.image is not None and worker.image.startswith("vllm ")
    assert "kvbench set" not in worker.image and "FLASHINFER" not in worker.image
