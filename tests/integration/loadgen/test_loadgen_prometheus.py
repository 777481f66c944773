"""The Prometheus counter path against a real Prometheus (Debian's package) that scrapes two
simulators on loopback; the test starts and stops everything itself."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from loadgen_helpers import small_config

from kvbench.loadgen.measure import run_sync
from kvbench.testing.prometheus import PROMETHEUS, running_prometheus

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
    with running_prometheus(
        tmp_path, f"  - job_name: sims\n    static_configs:\n{targets}\n"
    ) as url:
        yield sims, url


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
