"""The Prometheus counter path against a real Prometheus (Debian's package) that scrapes two
simulators on loopback; the test starts and stops everything itself."""

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from loadgen_helpers import small_config

from kvbench.loadgen.measure import run_sync
from kvbench.procs import free_port

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run does)",
)


@pytest.fixture
def sims_and_prometheus(start_sim, tmp_path: Path) -> Iterator[tuple[list, str]]:
    sims = [start_sim(f"sim-{i}", "--time-scale", "0.01") for i in range(2)]
    targets = "\n".join(
        f"      - targets: ['127.0.0.1:{s.port}']\n        labels: {{pod: {s.name}}}" for s in sims
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: sims\n    static_configs:\n{targets}\n"
    )
    for _attempt in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        if _wait_ready(proc, url):
            break
        proc.terminate()
        proc.wait(10)
    else:
        pytest.fail("Prometheus did not become ready")
    try:
        yield sims, url
    finally:
        proc.terminate()
        proc.wait(20)


def _wait_ready(proc: subprocess.Popen, url: str) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def test_prometheus_deltas_per_pod_match_the_responses(sims_and_prometheus) -> None:
    sims, prometheus = sims_and_prometheus
    config = small_config(
        sims[0].url,
        target={"kind": "prefix-affinity", "pods": {s.name: s.url for s in sims}},
        workload={"sharedPrefix": {"prefixes": [4], "requestsPerPrefix": 1, "minRequests": 16}},
        point={"concurrency": 4, "prefixes": 4},
        timeScale=0.01,
        metrics={
            "kind": "prometheus",
            "url": prometheus,
            "selector": {"job": "sims"},
            "pods": [s.name for s in sims],
            "scrapeWait": "30s",
        },
    )
    result = run_sync(config)
    assert result.counters.error is None, result.counters.error
    assert result.counters.source == "prometheus"
    assert result.summary.errors == 0
    pods = {p.pod: p for p in result.counters.pods or []}
    assert set(pods) == {"sim-0", "sim-1"}
    for name, pod in pods.items():
        mine = [r for r in result.records() if r.phase == "measured" and r.endpoint == name]
        assert pod.requests == len(mine)
        assert pod.prefix_cache_hits == sum(r.cached_tokens or 0 for r in mine)
        assert pod.prefix_cache_queries == sum(r.prompt_tokens or 0 for r in mine)
        assert pod.generation_tokens == sum(r.output_tokens or 0 for r in mine)
        assert pod.kv_cache_tokens == 9360
    assert result.summary.hit_rates.agree is True
