"""Router modes on identical sequences: random spreads a shared prefix, kv beats random on
hit rate under cache pressure with concurrency."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from dynamo_helpers import one_by_one

from kvbench.dynamo import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    ModelDir,
    RouterMode,
    RouterOptions,
    scrape_worker,
)
from kvbench.dynamo.routing_check import (
    RoutingSummary,
    SequenceSpec,
    run_sequence,
    summarize_routing,
)

pytestmark = pytest.mark.timeout(240)

# The setting: 16 prefixes x 20 requests, 16 in flight, 320 blocks a worker.
PRESSURE = SequenceSpec(seed=7, prefixes=16, requests_per_prefix=20, concurrency=16)


def spec(model_dir: ModelDir, mode: RouterMode, workers: int, blocks: int) -> DeploymentSpec:
    return DeploymentSpec(
        model_path=model_dir.path,
        workers=workers,
        mocker=MockerOptions(num_gpu_blocks=blocks, speedup_ratio=1.0),
        router=RouterOptions(mode=mode),
    )


def measure(
    model_dir: ModelDir, mode: RouterMode, sequence: SequenceSpec
) -> tuple[RoutingSummary, dict[int, float]]:
    """The run's summary, and the requests each worker counted itself (by instance id)."""
    with (
        tempfile.TemporaryDirectory(prefix="kvbench-dynamo-") as scratch,
        DynamoDeployment(spec(model_dir, mode, 4, 320), Path(scratch)) as deployment,
    ):
        before = {w.instance_id: scrape_worker(w.metrics_url) for w in deployment.workers}
        summary = summarize_routing(run_sequence(deployment, sequence))
        deployment.wait_idle()
        counted = {
            w.instance_id: scrape_worker(w.metrics_url).minus(before[w.instance_id]).requests_total
            for w in deployment.workers
        }
    return summary, counted


def test_random_router_spreads_a_shared_prefix(model_dir: ModelDir, tmp_path: Path) -> None:
    prefix = list(range(2000, 2256))
    prompts = [prefix + list(range(3000 + 16 * i, 3016 + 16 * i)) for i in range(12)]
    with DynamoDeployment(spec(model_dir, "random", 3, 2048), tmp_path) as deployment:
        records = one_by_one(deployment, prompts)
    assert len({r.worker_id for r in records}) >= 2


def test_kv_beats_random_on_hit_rate_under_pressure(model_dir: ModelDir) -> None:
    random_run, random_counted = measure(model_dir, "random", PRESSURE)
    kv_run, kv_counted = measure(model_dir, "kv", PRESSURE)
    for run, counted in ((random_run, random_counted), (kv_run, kv_counted)):
        assert run.requests == 320
        # The frontend's attribution (nvext.worker_id) against each worker's own counter.
        assert {w.instance_id: w.requests for w in run.workers} == {
            instance_id: requests for instance_id, requests in counted.items() if requests
        }
    # Random sends (nearly) every prefix to every worker; kv keeps each on fewer workers.
    random_groups = sum(w.groups for w in random_run.workers)
    assert random_groups >= 60
    assert sum(w.groups for w in kv_run.workers) < random_groups
    assert kv_run.hit_rate > random_run.hit_rate + 0.1, (random_run, kv_run)
