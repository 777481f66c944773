"""A router arm on the simulator's clock: vllm-router's cache_aware balances by the requests in
flight on the wall clock, so its runs go at `simulator.routerTimeScale` (real time by
default) whatever the experiment's time scale, and its choices then stay put when the time
scale changes (bench/router_time_scale.py measures the same at more scales and under load)."""

import copy
from pathlib import Path
from typing import Any

import pytest

from conftest import Ran, run_experiment
from kvbench.api import parse_experiment

pytestmark = pytest.mark.slow

DOCUMENT: dict[str, Any] = {
    "apiVersion": "kvbench.io/v1alpha1",
    "kind": "BenchmarkExperiment",
    "metadata": {"name": "router-clock"},
    "spec": {
        "engine": {
            "model": "Qwen/Qwen3-0.6B", "maxModelLen": 4096, "kvCacheMemoryBytes": 1073741824,
            "gpuMemoryUtilization": 0.01, "enablePromptTokensDetails": True,
        },
        "workers": [{"name": "gpu", "replicas": 4,
                     "simulation": {"profile": "qwen3-0.6b-h200", "workersPerGpu": 4}}],
        "routing": [{"name": "cache-aware", "router": {"policy": "cache_aware"}}],
        "workload": {"promptFormat": "text",
                     "sharedPrefix": {"prefixes": [8], "prefixTokens": 2032, "suffixTokens": 339,
                                      "outputTokens": 64, "requestsPerPrefix": 8}},
        "load": {"concurrency": [8], "trials": 1, "seed": 2324, "connection": "new"},
        "simulator": {"timeScale": 0.05},
    },
}  # fmt: skip

SHARE_BOUND = 0.05
"""Largest share of the requests that may change pods between time scales 1 and 2."""
HIT_BOUND = 0.05
"""Largest change of the request hit rate between them."""


def _run(out: Path, router_time_scale: float | None) -> Ran:
    document = copy.deepcopy(DOCUMENT)
    if router_time_scale is not None:
        document["spec"]["simulator"]["routerTimeScale"] = router_time_scale
    return run_experiment(parse_experiment(document), out)


def _shares(ran: Ran) -> dict[str, float]:
    [record] = ran.records
    total = sum(p.requests or 0 for p in record.pods)
    return {p.pod: (p.requests or 0) / total for p in record.pods}


def test_cache_aware_choices_stay_put_between_time_scales(tmp_path: Path) -> None:
    """Catches a router arm run at the experiment's time scale (0.05 here), where the
    router's own latency and this machine's, not scaled, decide which requests are in flight
    when it chooses: at 0.05 the bench saw it send the four workers 20, 40, 40 and 60 of 160
    requests; in real time, as on real vLLM, two prefixes (40 requests) each."""
    default, slower = _run(tmp_path / "default", None), _run(tmp_path / "s2", 2.0)
    [record] = default.records
    print({p.pod: p.requests for p in record.pods}, record.summary.request_hit_rate)
    assert set(_shares(default).values()) == {0.25}, "two prefixes per worker"
    ours, theirs = _shares(default), _shares(slower)
    moved = sum(abs(ours[p] - theirs[p]) for p in ours) / 2
    assert moved <= SHARE_BOUND
    hits = record.summary.request_hit_rate, slower.records[0].summary.request_hit_rate
    assert abs(hits[0] - hits[1]) <= HIT_BOUND, hits
