"""`kvbench run --engine vllm` end to end, through `bench/real_vs_sim.py` (the simulator side,
then the real side) with a fake `vllm serve`: the simulator, which takes vLLM's flags, behind a
wrapper that writes down how it was started. The workers get the experiment's vLLM arguments
and nothing of the simulator's, their GPUs and the engine's environment; the first start warms
alone; the load runs on the wall clock; the records say vLLM; the results directory refuses
simulated runs afterwards; and the bench's table puts both sides' runs side by side."""

import ipaddress
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kvbench.api import BenchmarkExperiment, load_experiment
from kvbench.loadgen.results import read_result
from kvbench.runner import DirectoryStore

ROOT = Path(__file__).resolve().parents[3]
FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
BENCH = ROOT / "bench" / "real_vs_sim.py"
RUN_ID = "default.service.p2-c2.t1"
SIM_ONLY = ("--profile", "--time-scale", "--worker-id", "--seed", "--gpu-memory-bytes",
            "--kv-capacity-jitter", "--kv-events-config")  # fmt: skip


@dataclass(frozen=True)
class Bench:
    file: Path
    experiment: BenchmarkExperiment
    out: Path
    stdout: str
    starts: list[dict]
    """What every fake vLLM was started with, in start order."""


def _experiment(tmp: Path) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    for pool in spec["workers"]:
        pool["replicas"] = 1
    spec["engine"]["env"] = [{"name": "FAKE_VLLM_MARK", "value": "from-the-engine"}]
    spec["simulator"] = {"timeScale": 0.05}
    spec["workload"] = {"sharedPrefix": {"prefixes": [2], "prefixTokens": 256,
                                         "suffixTokens": 16, "outputTokens": 4,
                                         "requestsPerPrefix": 4, "minRequests": 8}}  # fmt: skip
    spec["load"].update(concurrency=[2], trials=1)
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Bench:
    tmp = tmp_path_factory.mktemp("real-vs-sim")
    file, out, starts = _experiment(tmp), tmp / "out", tmp / "starts"
    done = subprocess.run(
        [sys.executable, str(BENCH), str(file), str(out), "--real", "--json", str(tmp / "t.json"),
         "--vllm-command", f"{sys.executable} {FAKE_VLLM} {starts} serve", "--gpus", "3,5",
         "--vllm-arg=--load-seconds=1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sim: exit 0" in done.stdout and "real: exit 0" in done.stdout, done.stdout
    records = [json.loads(p.read_text()) for p in starts.glob("*.json")]
    return Bench(file, load_experiment(file), out, done.stdout,
                 sorted(records, key=lambda r: r["time"]))  # fmt: skip


def test_workers_get_the_vllm_argv_gpus_and_env(bench: Bench) -> None:
    engine = bench.experiment.spec.engine
    assert len(bench.starts) == 2, "one start of two workers"
    for start in bench.starts:
        argv = start["argv"]
        assert not [a for a in argv if a.split("=")[0] in SIM_ONLY], argv
        host = argv[argv.index("--host") + 1]
        port = int(argv[argv.index("--port") + 1])
        assert ipaddress.ip_address(host).is_loopback
        expected = engine.model_copy(update={"port": port}).vllm_args()
        assert argv == ["serve", *expected, "--host", host, "--load-seconds=1"]
        assert start["env"]["FAKE_VLLM_MARK"] == "from-the-engine"
    assert sorted(s["env"]["CUDA_VISIBLE_DEVICES"] for s in bench.starts) == ["3", "5"]
    assert bench.starts[1]["time"] - bench.starts[0]["time"] >= 1.0, "the second waited"


def test_records_say_vllm_and_the_load_ran_on_the_wall_clock(bench: Bench) -> None:
    store = DirectoryStore(bench.out / "real")
    store.load()
    [run] = store.records()
    assert run.error is None, run.error
    assert len(run.pods) == 2 and all((p.image or "").startswith("vllm ") for p in run.pods)
    assert all(p.kv_cache_tokens for p in run.pods), "measured from each worker's /metrics"
    assert run.raw_results is not None
    result = read_result(store.read_raw(run.raw_results))
    assert bench.experiment.spec.simulator.time_scale == 0.05
    assert result.config.time_scale == 1.0, "real vLLM is not time-scaled"
    assert (bench.out / "real" / "work" / "engine").read_text().strip() == "vllm"

    mixed = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(bench.file), "--out", str(bench.out / "real")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mixed.returncode != 0
    assert "has run --engine vllm workers" in mixed.stdout + mixed.stderr


def test_the_table_compares_the_same_run_on_both_sides(bench: Bench) -> None:
    figures = json.loads((bench.out.parent / "t.json").read_text())
    sim, real = figures["sim"][RUN_ID], figures["real"][RUN_ID]
    assert sim["digest"] == real["digest"], "same file, same seeds: the same requests"
    sim_store = DirectoryStore(bench.out / "sim")
    sim_store.load()
    [sim_run] = sim_store.records()
    assert (sim["digest"], sim["request_hit"]) == (sim_run.digest, sim_run.summary.request_hit_rate)
    assert sim_run.summary.latency_clock == "simulated"
    assert set(real["pod_requests"]) == {"gpu24-0", "gpu8-0"}
    [row] = [line for line in bench.stdout.splitlines() if line.startswith(RUN_ID)]
    assert row.split()[1] == "same"
    assert any(line.strip().startswith("default.service.p2-c2 ") and "trials 1" in line
               for line in bench.stdout.splitlines())  # fmt: skip
