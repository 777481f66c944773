"""`kvbench run` as a user runs it: Ctrl-C stops every process, kill -9 at every stage of a
run is survived (every run recorded exactly once, a load still running adopted, one whose
process is gone run again), and the report and comparison render from the directory."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvbench.api import load_experiment
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.results import read_result
from kvbench.loadgen.workload import build_sequence
from kvbench.plan import plan_experiment
from kvbench.runner.cluster.local.children import LocalChildren

ROOT = Path(__file__).resolve().parents[3]
KVBENCH = [sys.executable, "-m", "kvbench"]


def _write_experiment(tmp_path: Path, replicas: int, prefixes: list[int], trials: int) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = replicas
    spec["routing"] = [
        {"name": "service", "service": {}},
        {"name": "affinity", "prefixAffinity": {}},
    ]
    spec["workload"] = {"sharedPrefix": {"prefixes": prefixes}}
    spec["load"].update(concurrency=[4], trials=trials)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def small_experiment(tmp_path: Path) -> Path:
    return _write_experiment(tmp_path, replicas=3, prefixes=[7], trials=2)


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, int(port))) == 0


def _worker_addresses(out: Path) -> list[str]:
    found = []
    for log in (out / "work" / "logs").rglob("*.log"):
        found += re.findall(r"Uvicorn running on http://([\d.]+:\d+)", log.read_text())
    return found


def _alive_children(out: Path) -> list[str]:
    children = LocalChildren(out / "work" / "children")
    return [c.name for c in children.all() if children.alive(c)]


def _finished_runs(out: Path) -> set[str]:
    """The runs whose checkpoint says finished: what a resume skips. A record is written just
    before its run's state says so, and an interrupt between the two re-records the run from
    its raw results, so the record files alone overcount."""
    states = (json.loads(p.read_text()) for p in (out / "state").glob("r*.json"))
    return {s["id"] for s in states if s["stage"] in ("recorded", "failed")}


def _journal(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_interrupt_resume_report_compare(small_experiment: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    plan = plan_experiment(load_experiment(small_experiment))
    assert len(plan.runs) == 4

    first = subprocess.Popen(
        [*KVBENCH, "run", str(small_experiment), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not _finished_runs(out):
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "no run finished in time"
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 130, output
    assert "run `kvbench run" in output and "again to resume" in output
    interrupted = _finished_runs(out)
    assert 1 <= len(interrupted) < 4
    addresses = _worker_addresses(out)
    assert addresses, "the workers logged their addresses"
    assert not [a for a in addresses if _listening(a)], "every worker stopped on Ctrl-C"
    assert _alive_children(out) == []

    second = subprocess.run(
        [*KVBENCH, "run", str(small_experiment), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"resuming: {len(interrupted)} of 4 runs already recorded" in second.stdout
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("r*.json"))]
    assert sorted(r["id"] for r in records) == sorted(r.id for r in plan.runs)
    assert len(list((out / "raw").glob("*.json.gz"))) == 4
    assert "Hit rate" in (out / "report.txt").read_text()
    assert "simulated" in second.stdout
    assert (out / "hit_rate.png").stat().st_size > 0
    assert (out / "ttft.png").stat().st_size > 0
    assert not [a for a in _worker_addresses(out) if _listening(a)]
    status = json.loads((out / "status.json").read_text())
    assert status["phase"] == "Succeeded" and status["progress"]["display"] == "4/4"

    report = subprocess.run([*KVBENCH, "report", str(out)], capture_output=True, text=True)
    assert report.returncode == 0 and "TTFT p50 / p99" in report.stdout
    compare = subprocess.run(
        [*KVBENCH, "compare", f"{out}@service", f"{out}@affinity"], capture_output=True, text=True
    )
    assert compare.returncode == 0, compare.stderr
    assert "p7-c4" in compare.stdout and "hit A" in compare.stdout


def _start(experiment: Path, out: Path, hold: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("KVBENCH_HOLD_AT", None)
    if hold:
        env["KVBENCH_HOLD_AT"] = hold
    return subprocess.Popen(
        [*KVBENCH, "run", str(experiment), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def _wait_for(check, process: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert process.poll() is None, f"kvbench run exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.02)


def _running_load(out: Path) -> str | None:
    children = LocalChildren(out / "work" / "children")
    loads = [c for c in children.all("load") if children.alive(c)]
    return loads[0].name if loads else None


def test_kill_9_at_every_stage_records_every_run_exactly_once(tmp_path: Path) -> None:
    """Kill a real `kvbench run` with SIGKILL at each stage of a run in turn (held there by
    the runner's fault-injection point), then once while its load generator runs, once with
    the load generator killed too; each time start it again. At the end every planned run is
    recorded exactly once with the planned request sequence, the adopted load counted as its
    first attempt, the vanished one as a failed attempt, and no process is left."""
    experiment_file = _write_experiment(tmp_path, replicas=2, prefixes=[2], trials=5)
    experiment = load_experiment(experiment_file)
    plan = plan_experiment(experiment)
    assert len(plan.runs) == 10
    out = tmp_path / "results"
    held = out / "held"
    for stage in ("workers-starting", "workers-ready", "arm-open", "load-running"):
        process = _start(experiment_file, out, stage)
        _wait_for(held.exists, process, f"a hold at {stage}")
        process.kill()
        process.wait()
        assert json.loads(held.read_text())["stage"] == stage
        held.unlink()

    process = _start(experiment_file, out, None)
    _wait_for(lambda: _running_load(out) is not None, process, "a running load generator")
    adopted = _running_load(out)
    process.kill()
    process.wait()
    assert adopted is not None and _running_load(out) == adopted, "the load outlives its runner"

    for stage in ("collecting", "recorded"):
        process = _start(experiment_file, out, stage)
        _wait_for(held.exists, process, f"a hold at {stage}")
        process.kill()
        process.wait()
        held.unlink()

    process = _start(experiment_file, out, None)
    _wait_for(lambda: _running_load(out) is not None, process, "a running load generator")
    vanished = _running_load(out)
    process.kill()
    process.wait()
    children = LocalChildren(out / "work" / "children")
    load = children.get(vanished)
    os.killpg(load.pid, signal.SIGKILL)

    final = subprocess.run(
        [*KVBENCH, "run", str(experiment_file), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert final.returncode == 0, final.stdout + final.stderr

    recorded = [e["index"] for e in _journal(out) if e["stage"] == "recorded"]
    assert sorted(recorded) == list(range(10)), "every run recorded exactly once, none lost"
    records = {
        r["index"]: r for r in map(json.loads, map(Path.read_text, (out / "runs").glob("r*.json")))
    }
    assert sorted(records) == list(range(10))
    spec = experiment.spec
    for run in plan.runs:
        result = read_result((out / records[run.index]["rawResults"]).read_bytes())
        planned = build_sequence(spec.workload, run.point, run.seed, spec.load.warmup, TokenSpace())
        assert result.conditions.digest == planned.digest, run.id
        assert records[run.index]["digest"] == planned.digest
    adopted_index = int(adopted.split("-r")[1].split("-")[0])
    assert records[adopted_index]["attempt"] == 1, "the running load was adopted"
    vanished_index = int(vanished.split("-r")[1].split("-")[0])
    lost = records[vanished_index]
    assert lost["attempt"] == 2 and lost["failedAttempts"][0]["reason"] == "LoadFailed"
    assert _alive_children(out) == []
    assert not [a for a in _worker_addresses(out) if _listening(a)]
