"""An external arm on the local back end: the load goes to a front end someone else runs (here
a simulator the test starts), on the same seeded sequence as the other arms; with no pods to
read, the run's hit rate comes from the responses alone."""

import copy
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.procs import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def external_server(tmp_path: Path):
    port = free_port()
    log = (tmp_path / "external.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "kvbench.sim", "serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1",
         "--port", str(port), "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824",
         "--enable-prompt-tokens-details", "--time-scale", "0.05"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "external server down"
        time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(10)


def test_external_arm_gets_the_same_sequence(external_server, tmp_path: Path, run_local) -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document = copy.deepcopy(document)
    spec = document["spec"]
    spec["workers"] = [{"name": "gpu", "replicas": 2}]
    spec["routing"] = [
        {"name": "service", "service": {}},
        {"name": "outside", "external": {"url": external_server, "podSelector": {"app": "x"}}},
    ]
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["load"].update(concurrency=[4], trials=1)
    ran = run_local(parse_experiment(document), tmp_path / "out")
    outside, service = ran.point("outside"), ran.point("service")
    assert outside.digest == service.digest
    assert outside.summary.errors == 0 and outside.summary.requests == 200
    assert outside.pods == [] and outside.summary.token_hit_rate is None
    assert outside.summary.request_hit_rate == 1.0, "one server, both prefixes warmed"
    assert len(service.pods) == 2
    # every measured request went to the external front end, none to the experiment's workers
    measured = [r for r in ran.result(outside).records() if r.phase == "measured"]
    assert len(measured) == 200 and {r.endpoint for r in measured} == {external_server}
