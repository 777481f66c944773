"""The status stays small however long the experiment: 1,000 runs on 16 pods under 256 KiB,
because per-run, per-pod records live in the store, not in the status."""

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import yaml

from kvbench.api import PodResult, RunRecord, RunSummary, parse_experiment
from kvbench.plan import plan_experiment
from kvbench.runner import DirectoryStore, aggregate
from kvbench.runner.status import experiment_status

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 256 * 1024


def _thousand_runs_on_16_pods():
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    spec["workers"] = [{"name": f"pool{i}", "replicas": 4} for i in range(4)]
    spec["routing"] = [{"name": f"arm{i}", "service": {}} for i in range(5)]
    spec["workload"]["sharedPrefix"]["prefixes"] = list(range(1, 21))
    spec["load"].update(concurrency=[4, 8], trials=5)
    return parse_experiment(document)


def _record(run, now) -> RunRecord:
    return RunRecord(
        id=run.id,
        index=run.index,
        arm=run.arm,
        variant=run.variant,
        point=run.point,
        trial=run.trial,
        seed=run.seed,
        digest="sha256:" + "0" * 64,
        started_at=now,
        finished_at=now,
        pods=[
            PodResult(
                pod=f"experiment-name-pool{p // 4}-{p % 4}",
                uid=str(uuid.uuid4()),
                node=f"gpu-node-{p}",
                address=f"http://10.0.{p}.17:8000",
                image="vllm/vllm-openai:v0.31.0",
                gpu_product="NVIDIA-H200",
                gpu_index="0",
                kv_cache_tokens=22048,
                startup_seconds=41.25,
                prefix_cache_queries=123456.0,
                prefix_cache_hits=98765.0,
                requests=33.0,
                prompt_tokens=123456.0,
                generation_tokens=4321.0,
            )
            for p in range(16)
        ],
        summary=RunSummary(
            requests=480, request_hit_rate=0.55, token_hit_rate=0.52, ttft_p50=0.05, ttft_p99=0.4
        ),
        raw_results=f"raw/r{run.index}-a1.json.gz",
    )


def test_a_thousand_runs_on_sixteen_pods_keep_the_status_under_256_kib(tmp_path: Path) -> None:
    experiment = _thousand_runs_on_16_pods()
    plan = plan_experiment(experiment)
    assert len(plan.runs) == 1000 and experiment.spec.total_workers == 16
    store = DirectoryStore(tmp_path)
    store.open(experiment)
    now = datetime.now(UTC)
    for run in plan.runs:
        store.save_run(_record(run, now))
    store.save_aggregate(aggregate(experiment.spec, store.records()))
    status = experiment_status(plan, store, None, now, now, 1)
    size = len(json.dumps(status.to_k8s()))
    print(f"status of 1,000 runs on 16 pods: {size} bytes")
    assert status.progress.done == 1000 and len(status.last_run.pods) == 16
    assert len(status.aggregate) == 200, "every arm x point is in the status"
    assert size < LIMIT
