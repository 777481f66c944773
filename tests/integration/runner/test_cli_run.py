"""`kvbench run` as a user runs it: Ctrl-C stops every process, a second run resumes and
records every run exactly once, and the report and comparison render from the directory."""

import json
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
from kvbench.plan import plan_experiment

ROOT = Path(__file__).resolve().parents[3]
KVBENCH = [sys.executable, "-m", "kvbench"]


@pytest.fixture
def small_experiment(tmp_path: Path) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 3
    spec["routing"] = [
        {"name": "service", "service": {}},
        {"name": "affinity", "prefixAffinity": {}},
    ]
    spec["workload"] = {"sharedPrefix": {"prefixes": [7]}}
    spec["load"].update(concurrency=[4], trials=2)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


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
    while not list((out / "runs").glob("*.json")):
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "no run finished in time"
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 130, output
    assert "run `kvbench run" in output and "again to resume" in output
    interrupted = {p.stem for p in (out / "runs").glob("*.json")}
    assert 1 <= len(interrupted) < 4
    addresses = _worker_addresses(out)
    assert addresses, "the workers logged their addresses"
    assert not [a for a in addresses if _listening(a)], "every worker stopped on Ctrl-C"

    second = subprocess.run(
        [*KVBENCH, "run", str(small_experiment), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"resuming: {len(interrupted)} of 4 runs already recorded" in second.stdout
    recorded = sorted(p.stem for p in (out / "runs").glob("*.json"))
    assert recorded == sorted(r.id for r in plan.runs)
    indexes = [json.loads((out / "runs" / f"{i}.json").read_text())["index"] for i in recorded]
    assert sorted(indexes) == [0, 1, 2, 3]
    assert len(list((out / "raw").glob("*.json"))) == 4
    assert "Hit rate" in (out / "report.txt").read_text()
    assert "simulated" in second.stdout
    assert (out / "hit_rate.png").stat().st_size > 0
    assert (out / "ttft.png").stat().st_size > 0
    assert not [a for a in _worker_addresses(out) if _listening(a)]

    report = subprocess.run([*KVBENCH, "report", str(out)], capture_output=True, text=True)
    assert report.returncode == 0 and "TTFT p50 / p99" in report.stdout
    compare = subprocess.run(
        [*KVBENCH, "compare", f"{out}@service", f"{out}@affinity"], capture_output=True, text=True
    )
    assert compare.returncode == 0, compare.stderr
    assert "p7-c4" in compare.stdout and "hit A" in compare.stdout


def test_out_directory_of_another_experiment_is_refused(
    small_experiment: Path, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "experiment.yaml").write_text(yaml.safe_dump({"spec": {"other": True}}))
    result = subprocess.run(
        [*KVBENCH, "run", str(small_experiment), "--out", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "another experiment" in result.stderr
