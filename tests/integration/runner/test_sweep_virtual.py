"""`kvbench sweep` end to end in virtual time: a tiny grid run through the command, its
results directories, table, JSON and plot, and the same command resuming it."""

import json
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.runner import DirectoryStore

TINY = {
    "apiVersion": "kvbench.io/v1alpha1",
    "kind": "BenchmarkExperiment",
    "metadata": {"name": "tiny-sweep"},
    "spec": {
        "engine": {"model": "Qwen/Qwen3-0.6B", "maxModelLen": 4096, "kvCacheMemoryBytes": "1Gi"},
        "workers": [{"name": "gpu", "replicas": 3, "simulation": {"profile": "qwen3-0.6b-24gb"}}],
        "routing": [{"name": "service", "service": {}}],
        "workload": {"sharedPrefix": {"prefixes": [2], "requestsPerPrefix": 3, "minRequests": 12}},
        "load": {"concurrency": [2], "trials": 3, "seed": 7},
    },
}


def test_tiny_sweep_runs_reports_and_resumes(tmp_path: Path) -> None:
    """Catches: a sweep whose derived experiments do not run in virtual time, results that do
    not come back as ordinary results directories, arms or worker counts mixed up in the
    table (one worker: affinity cannot differ from the Service), no plot, and a second
    invocation that runs everything again instead of resuming."""
    file = tmp_path / "tiny.yaml"
    file.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "sweep"
    args = ["sweep", str(file), "--workers", "1,3", "--kv-tokens", "12k", "--prefixes", "1,6"]
    args += ["--trials", "1", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "8 runs in virtual time" in result.output

    for workers in (1, 3):
        store = DirectoryStore(out / f"w{workers}")
        store.load()
        records = store.records()
        assert len(records) == 8 // 2 and all(r.error is None for r in records)
        assert {len(r.pods) for r in records} == {workers}
        assert {r.arm for r in records} == {"service", "affinity"}
        assert {r.variant for r in records} == {"kv12288"}

    document = json.loads((out / "crossover.json").read_text())
    curves = {c["workers"]: c for c in document["curves"]}
    assert set(curves) == {1, 3}
    for point in curves[1]["points"]:  # one worker: both arms send everything to it
        assert point["service_hit_rate"] == point["affinity_hit_rate"]
    assert curves[1]["regimes"] != ["pays", "pays"]
    six = next(p for p in curves[3]["points"] if p["prefixes"] == 6)
    assert six["affinity_hit_rate"] > six["service_hit_rate"] + 0.05
    assert "pays" in curves[3]["regimes"]
    assert (out / "crossover.png").read_bytes()[:4] == b"\x89PNG"
    assert "affinity hit" in (out / "sweep.txt").read_text()

    started = time.monotonic()
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert time.monotonic() - started < 10  # nothing ran again
    assert json.loads((out / "crossover.json").read_text()) == document
