"""`kvbench run --engine vllm` with a kv_aware router arm (issue 19, defects 14 and 15), through
a fake `vllm serve` (the simulator behind a wrapper that writes down how it was started): the
workers are told to bind a KV-event port each and get port ranges of their own, the router
subscribes where the back end told them to publish, and its log shows the events arriving."""

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kvbench.api import load_experiment
from kvbench.runner import DirectoryStore
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.cluster.local.vllm_workers import PORT_SPAN

ROOT = Path(__file__).resolve().parents[3]
FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")


@dataclass(frozen=True)
class Ran:
    out: Path
    starts: list[dict]
    """What every fake vLLM was started with."""
    router_log: str


def _experiment(tmp: Path) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    for pool in spec["workers"]:
        pool["replicas"] = 1
    spec["routing"] = [
        {"name": "kv", "router": {"policy": "kv_aware", "extraArgs": ["--log-level", "debug"]}}
    ]
    spec["workload"] = {"promptFormat": "text",
                        "sharedPrefix": {"prefixes": [2], "prefixTokens": 256, "suffixTokens": 16,
                                         "outputTokens": 4, "requestsPerPrefix": 4,
                                         "minRequests": 8}}  # fmt: skip
    spec["load"].update(concurrency=[2], trials=1)
    path = tmp / "kv-aware.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Ran:
    tmp = tmp_path_factory.mktemp("kv-aware-vllm")
    file, out, starts = _experiment(tmp), tmp / "out", tmp / "starts"
    done = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(file), "--out", str(out), "--engine", "vllm",
         "--vllm-command", f"{sys.executable} {FAKE_VLLM} {starts} serve"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    experiment = load_experiment(file)
    names = ChildNames(experiment=experiment.metadata.name, index=0, attempt=1)
    log = out / "work" / "logs" / f"{names.arm}.log"
    router_log = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    records = [json.loads(p.read_text()) for p in starts.glob("*.json")]
    return Ran(out, records, router_log)


def test_each_worker_binds_its_own_event_port_and_gets_its_own_port_range(ran: Ran) -> None:
    assert len(ran.starts) == 2
    endpoints = []
    for start in ran.starts:
        argv = start["argv"]
        config = json.loads(argv[argv.index("--kv-events-config") + 1])
        endpoints.append(config["endpoint"])
    assert all(re.fullmatch(r"tcp://\*:\d+", e) for e in endpoints), endpoints
    assert len(set(endpoints)) == 2, endpoints
    a, b = sorted(int(s["env"]["VLLM_PORT"]) for s in ran.starts)
    assert b - a >= PORT_SPAN, (a, b)


def test_the_router_follows_the_workers_kv_events(ran: Ran) -> None:
    store = DirectoryStore(ran.out)
    store.load()
    [run] = store.records()
    assert run.error is None, run.error
    assert run.summary.errors == 0
    assert "kv_index live sequence advanced" in ran.router_log
    assert "decode batch" not in ran.router_log  # no KV event batch was rejected
