"""Freshness without restarts, end to end on the local back end: `reset-cache` empties every
worker's prefix cache between runs on the same processes (the engine's env reaches them:
vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1), `none` leaves it warm."""

import asyncio
from pathlib import Path

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]


def _experiment(freshness: str):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 3
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    spec["routing"] = [{"name": "service", "service": {}}, {"name": "again", "service": {}}]
    spec["load"].update(concurrency=[4], trials=1)
    spec["freshness"] = freshness
    spec["engine"]["env"] = [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]
    return parse_experiment(document)


def _misses(record) -> int:
    s = record.summary
    return round(s.requests * (1 - s.request_hit_rate))


@pytest.mark.parametrize("freshness", ["reset-cache", "none"])
def test_second_run_on_the_same_workers(tmp_path: Path, freshness: str) -> None:
    store = DirectoryStore(tmp_path)
    runner = ExperimentRunner(_experiment(freshness), LocalCluster(tmp_path / "work"), store)
    first, second = asyncio.run(runner.run()).records
    assert first.error is None and second.error is None, (first.error, second.error)
    assert first.digest == second.digest, "two arms, one point and trial: the same requests"
    assert [p.uid for p in first.pods] == [p.uid for p in second.pods], "the same processes"
    assert _misses(first) > 0, "3 workers, 2 prefixes warmed once: some pairs start cold"
    if freshness == "reset-cache":
        assert _misses(second) > 0, "the caches were emptied before the second run"
    else:
        assert _misses(second) == 0, "every (worker, prefix) pair is warm from the first run"


def test_reset_cache_needs_dev_mode_in_the_engine_env() -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["freshness"] = "reset-cache"
    with pytest.raises(ValueError, match="VLLM_SERVER_DEV_MODE=1"):
        parse_experiment(document)
