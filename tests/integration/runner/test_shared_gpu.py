"""A pool whose workers share simulated GPUs (`simulation.workersPerGpu`), on the HTTP path
(`kvbench sim` processes sharing through a file on the wall clock) and in virtual time: two
busy workers on one GPU decode slower than two with a GPU each, by the modelled factor, and
the report says the GPU was shared."""

import copy
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import Ran, run_experiment
from kvbench.api import parse_experiment
from kvbench.report import render_report
from kvbench.sim.args import parse_sim_args
from kvbench.sim.factory import build_engine

DOCUMENT: dict[str, Any] = {
    "apiVersion": "kvbench.io/v1alpha1",
    "kind": "BenchmarkExperiment",
    "metadata": {"name": "shared-gpu"},
    "spec": {
        "engine": {
            "model": "Qwen/Qwen3-0.6B", "maxModelLen": 2048, "kvCacheMemoryBytes": 536870912,
            "gpuMemoryUtilization": 0.01,
        },
        "workers": [{"name": "gpu", "replicas": 2,
                     "simulation": {"profile": "qwen3-0.6b-24gb"}}],
        "routing": [{"name": "affinity", "prefixAffinity": {}}],
        "workload": {"sharedPrefix": {"prefixes": [2], "prefixTokens": 256, "suffixTokens": 32,
                                      "outputTokens": 32, "requestsPerPrefix": 12}},
        "load": {"concurrency": [4], "trials": 1, "seed": 7, "connection": "new"},
        "simulator": {"timeScale": 1.0},
    },
}  # fmt: skip


def _run(out: Path, workers_per_gpu: int, virtual: bool) -> Ran:
    document = copy.deepcopy(DOCUMENT)
    document["spec"]["workers"][0]["simulation"]["workersPerGpu"] = workers_per_gpu
    return run_experiment(parse_experiment(document), out, virtual=virtual)


def _decode_step(slowdown: int) -> float:
    """The modelled decode step of one worker at concurrency 2 (two requests of ~300 tokens),
    with `slowdown` workers running steps on its GPU."""
    config, _ = parse_sim_args(
        ["--model", "Qwen/Qwen3-0.6B", "--max-model-len", "2048",
         "--kv-cache-memory-bytes", "536870912", "--profile", "qwen3-0.6b-24gb"]
    )  # fmt: skip
    cost = build_engine(config).core.cost
    return cost.step_time(2, 600, 600.0, slowdown)


@pytest.mark.parametrize("virtual", [False, True], ids=["http", "virtual"])
def test_two_busy_workers_on_one_gpu_decode_at_the_shared_rate(
    tmp_path: Path, virtual: bool
) -> None:
    """Catches `workersPerGpu` doing nothing (the workers get no shared GPU, or one each), a
    share the HTTP workers do not see across processes, and a report silent about it."""
    alone = _run(tmp_path / "alone", 1, virtual).records[0].summary
    shared_run = _run(tmp_path / "shared", 2, virtual)
    shared = shared_run.records[0].summary
    ratio = shared.itl_p50 / alone.itl_p50
    modelled = _decode_step(2) / _decode_step(1)
    print(f"ITL p50 alone {alone.itl_p50:.5f}, shared {shared.itl_p50:.5f}: x{ratio:.2f} "
          f"(modelled x{modelled:.2f})")  # fmt: skip
    assert modelled > 1.6, "the profile's decode step is mostly GPU time"
    assert ratio == pytest.approx(modelled, rel=0.1)
    console = Console(record=True, width=400)
    (tmp_path / "plots").mkdir()
    render_report(shared_run.store, console, tmp_path / "plots")
    assert "2 per simulated GPU, time-sliced" in console.export_text()
