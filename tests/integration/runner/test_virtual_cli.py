"""`kvbench run --virtual` as a user runs it: the whole experiment with no process started, a
report that says its clock, a results directory that refuses to be resumed on the HTTP path,
and arms or options that virtual time does not model refused before anything runs."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
KVBENCH = [sys.executable, "-m", "kvbench"]


def _experiment(
    tmp_path: Path, routing: list[dict], mode: str | None = None, text: bool = False
) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 3
    spec["routing"] = routing
    spec["workload"] = {"sharedPrefix": {"prefixes": [3], "requestsPerPrefix": 8}}
    if text:
        spec["workload"]["promptFormat"] = "text"
    spec["load"].update(concurrency=[4], trials=1)
    if mode is not None:
        spec["simulator"] = {"mode": mode}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVBENCH, "run", *args], capture_output=True, text=True, timeout=300)


ARMS = [{"name": "service", "service": {}}, {"name": "affinity", "prefixAffinity": {}}]


def test_a_virtual_run_reports_its_clock_and_keeps_its_mode(tmp_path: Path) -> None:
    """Catches a virtual report that calls its latencies a time-scaled wall clock, and a
    results directory that an HTTP run could be resumed into (mixing two clocks)."""
    file, out = _experiment(tmp_path, ARMS), tmp_path / "out"
    done = _run(str(file), "--virtual", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = (out / "report.txt").read_text()
    assert "virtual time (kvbench run --virtual)" in report
    assert "no wall clock was involved" in report
    assert yaml.safe_load((out / "experiment.yaml").read_text())["spec"]["simulator"][
        "mode"
    ] == "virtual"
    assert not (out / "work" / "children").exists()  # nothing was started
    again = _run(str(file), "--out", str(out))
    assert again.returncode != 0
    assert "holds results of another experiment" in again.stderr


def test_the_spec_field_runs_virtual_time_too(tmp_path: Path) -> None:
    file, out = _experiment(tmp_path, ARMS, mode="virtual"), tmp_path / "out"
    done = _run(str(file), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "virtual time (kvbench run --virtual)" in (out / "report.txt").read_text()


def test_what_virtual_time_does_not_model_is_refused_before_it_runs(tmp_path: Path) -> None:
    """Catches a router arm run as if it were a Service, and real vLLM asked for in virtual
    time."""
    router = {"name": "kv", "router": {"implementation": "vllm-router", "policy": "cache_aware"}}
    file, out = _experiment(tmp_path, [*ARMS, router], text=True), tmp_path / "out"
    refused = _run(str(file), "--virtual", "--out", str(out))
    assert refused.returncode == 1
    assert "spec.routing[2] (kv).router" in refused.stderr
    assert not (out / "runs").exists()
    engine = _run(str(_experiment(tmp_path, ARMS)), "--virtual", "--engine", "vllm")
    assert engine.returncode == 2
    assert "virtual time simulates its workers" in engine.stderr
