"""Running decode steps in one call (`EngineCore.decode_steps`, the timeline's default) gives
exactly what one step at a time gives: every request's times, tokens and cache hits, and every
worker's counters, on the article's layout through the Service and prefix affinity, with
chunked prefills, preemptions and an open loop."""

from pathlib import Path

import pytest

from kvbench.cli.common import read_experiment
from kvbench.loadgen.config import PrefixAffinityTarget, UrlTarget
from kvbench.plan import plan_experiment
from kvbench.runner.cluster.base import PodsEndpoint, UrlEndpoint
from kvbench.runner.cluster.local.workers import sim_command
from kvbench.runner.mapping import build_run_config
from kvbench.virtual.load import run_virtual_load
from kvbench.virtual.workers import VirtualWorker

ROOT = Path(__file__).resolve().parents[3]


def _workers(spec, run, kv_bytes: int | None) -> dict[str, VirtualWorker]:
    engine = spec.engines()[run.variant]
    if kv_bytes is not None:
        engine = engine.model_copy(update={"kv_cache_memory_bytes": kv_bytes})
    workers = {}
    for pool in spec.workers:
        for i in range(pool.replicas):
            name = f"{pool.name}-{i}"
            argv = sim_command(spec, engine, pool, name, "virtual", 0, 7)
            workers[name] = VirtualWorker(name, argv[argv.index("serve") :])
    return workers


@pytest.mark.parametrize(
    ("arm", "prefixes", "concurrency", "rate", "kv_bytes"),
    [
        ("service", 12, 16, None, None),
        ("affinity", 24, 8, None, None),
        ("service", 7, 16, 12.0, None),  # open loop (Poisson)
        ("affinity", 2, 16, None, 470 << 20),  # 8 per worker, a small cache: preemptions
    ],
)
def test_decode_runs_equal_single_steps(arm, prefixes, concurrency, rate, kv_bytes) -> None:
    """Catches a decode run that admits a request late (or early), skips a block allocation,
    a cache insertion or an eviction, mis-times a step, or misses a request that another
    worker's answer sent meanwhile."""
    experiment = read_experiment(ROOT / "examples" / "prefix-cache-service.yaml")
    spec = experiment.spec
    [run] = [
        r
        for r in plan_experiment(experiment).runs
        if r.point.prefixes == prefixes and r.point.concurrency == 16 and r.trial == 1
    ][:1]
    point = run.point.model_copy(update={"concurrency": concurrency, "request_rate": rate})
    run = run.model_copy(update={"point": point})
    results = []
    for stepwise in (True, False):
        workers = _workers(spec, run, kv_bytes)
        if arm == "service":
            endpoint = UrlEndpoint(arm=arm, url="http://service.virtual")
        else:
            endpoint = PodsEndpoint(arm=arm, pods={n: f"http://{n}.virtual" for n in workers})
        config = build_run_config(spec, run, endpoint, [], True)
        assert isinstance(config.target, UrlTarget | PrefixAffinityTarget)
        result = run_virtual_load(config, workers, "seed", stepwise=stepwise)
        results.append(result)
    single, runs = results
    assert runs.requests == single.requests
    assert runs.counters == single.counters
    if kv_bytes is not None:
        assert sum(p.preemptions for p in single.counters.pods) > 0
