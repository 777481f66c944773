"""Sequencing of the runner over a recording cluster: freshness, arms, checkpoints, resume."""

import asyncio
from pathlib import Path

import pytest
import yaml

from kvbench.api import PodResult, RunSummary, parse_experiment
from kvbench.runner import ExperimentRunner, ResultsStore, StoreMismatch
from kvbench.runner.cluster import Cluster, LoadOutcome, Target, WorkerInfo

ROOT = Path(__file__).resolve().parents[3]


def _experiment(**spec_changes):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["workload"]["sharedPrefix"]["prefixes"] = [2, 7]
    document["spec"]["load"]["trials"] = 2
    document["spec"]["routing"] = [
        {"name": "service", "service": {}},
        {"name": "cache-aware", "router": {"policy": "cache_aware"}},
        {"name": "affinity", "prefixAffinity": {}},
    ]
    document["spec"].update(spec_changes)
    return parse_experiment(document)


class RecordingCluster(Cluster):
    """Answers every call at once and remembers the calls; can fail at the n-th load."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.loads = 0
        self.fail_at = fail_at
        self.starts = 0

    def problems(self, spec):
        return []

    async def start_workers(self, spec, variant, engine, arm):
        self.starts += 1
        self.calls.append(f"start:{variant}:{arm.worker_kind}")
        return [
            WorkerInfo(
                name=f"w{i}",
                pool="gpu",
                node="n",
                base_url=f"http://127.0.1.{i}:1",
                metrics_url=f"http://127.0.1.{i}:1/metrics",
                kv_cache_tokens=9360,
                startup_seconds=1.5,
            )
            for i in range(spec.total_workers)
        ]

    async def reset_caches(self, workers):
        self.calls.append("reset")

    async def open_arm(self, spec, arm, workers):
        self.calls.append(f"open:{arm.name}")
        return Target(arm=arm.name, url="http://127.0.0.1:9")

    async def close_arm(self):
        self.calls.append("close-arm")

    async def run_load(self, spec, run, target, workers):
        self.loads += 1
        if self.fail_at is not None and self.loads == self.fail_at:
            raise RuntimeError("load generator failed")
        self.calls.append(f"load:{run.id}")
        prefixes = run.point.prefixes or 1
        rate = min(1.0, 3.95 / prefixes)
        return LoadOutcome(
            summary=RunSummary(
                requests=run.measured_requests,
                request_hit_rate=rate,
                token_hit_rate=rate,
                ttft_p50=0.05,
                ttft_p99=0.2,
            ),
            pods=[
                PodResult(pod=w.name, prefix_cache_queries=100, prefix_cache_hits=100 * rate)
                for w in workers
            ],
            digest=f"sha256:{run.seed:x}",
            raw_document="{}",
        )

    async def worker_logs(self, worker):
        return f"first line\nlast line of {worker.name}"

    async def close(self):
        self.calls.append("close")


def test_restart_freshness_starts_workers_for_every_run(tmp_path: Path) -> None:
    cluster = RecordingCluster()
    records = asyncio.run(ExperimentRunner(_experiment(), cluster, ResultsStore(tmp_path)).run())
    assert len(records) == 3 * 2 * 2
    assert cluster.starts == len(records)
    assert cluster.calls[-1] == "close"
    assert all(len(r.pods) == 6 and r.pods[0].kv_cache_tokens == 9360 for r in records)


def test_no_freshness_reuses_workers_and_arms(tmp_path: Path) -> None:
    cluster = RecordingCluster()
    asyncio.run(
        ExperimentRunner(_experiment(freshness="none"), cluster, ResultsStore(tmp_path)).run()
    )
    assert cluster.starts == 1
    assert [c for c in cluster.calls if c.startswith("open")] == [
        "open:service",
        "open:cache-aware",
        "open:affinity",
    ]


def test_interrupted_experiment_resumes_with_every_run_once(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    failing = RecordingCluster(fail_at=5)
    with pytest.raises(RuntimeError, match="load generator failed") as caught:
        asyncio.run(ExperimentRunner(_experiment(), failing, store).run())
    assert "last line of w5" in "\n".join(caught.value.__notes__), "worker logs explain it"
    assert failing.calls[-1] == "close", "the cluster is closed on failure too"
    assert len(store.done()) == 4
    resumed = RecordingCluster()
    records = asyncio.run(ExperimentRunner(_experiment(), resumed, store).run())
    assert len([c for c in resumed.calls if c.startswith("load")]) == 12 - 4
    assert sorted(r.id for r in records) == sorted({r.id for r in records})
    assert [r.index for r in records] == list(range(12))


def test_aggregate_and_capacity_model(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    asyncio.run(ExperimentRunner(_experiment(), RecordingCluster(), store).run())
    points = {(p.arm, p.point.key): p for p in store.aggregate()}
    assert len(points) == 3 * 2
    seven = points[("service", "p7-c8")]
    assert seven.trials == 2
    assert seven.request_hit_rate == pytest.approx(3.95 / 7)
    held = 9360 / 2371
    assert seven.predicted_hit_rate == pytest.approx(held / 7)
    assert seven.affinity_bound == 1.0
    assert points[("service", "p2-c8")].predicted_hit_rate == 1.0


def test_directory_of_another_experiment_is_refused(tmp_path: Path) -> None:
    asyncio.run(ExperimentRunner(_experiment(), RecordingCluster(), ResultsStore(tmp_path)).run())
    other = _experiment(freshness="none")
    with pytest.raises(StoreMismatch, match="another experiment"):
        asyncio.run(ExperimentRunner(other, RecordingCluster(), ResultsStore(tmp_path)).run())


def test_dynamo_arms_bring_their_own_workers(tmp_path: Path) -> None:
    """Without freshness, vLLM workers are shared by the arms that use them; every Dynamo arm
    starts its own workers (its router mode is part of the Dynamo deployment)."""
    cluster = RecordingCluster()
    arms = [
        {"name": "service", "service": {}},
        {"name": "affinity", "prefixAffinity": {}},
        {"name": "dyn-random", "dynamo": {"routerMode": "random"}},
        {"name": "dyn-kv", "dynamo": {"routerMode": "kv"}},
    ]
    experiment = _experiment(freshness="none", routing=arms)
    asyncio.run(ExperimentRunner(experiment, cluster, ResultsStore(tmp_path)).run())
    starts = [c for c in cluster.calls if c.startswith("start")]
    assert starts == ["start:default:vllm", "start:default:dynamo", "start:default:dynamo"]
