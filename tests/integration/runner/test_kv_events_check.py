"""The local back end's check of a kv_aware window, end to end: the router's KV event batches
per worker are counted from its log after the window and recorded, and a window in which the
router heard nothing from workers that served requests is a failed attempt (`NoKvEvents`),
never a good kv_aware run.

Catches: a kv_aware router that routed on load alone (no events reached it) recorded as a
kv_aware figure; a router started without the log filter the count reads (every count 0, a
good run flagged); counts that never reach the record.
"""

import asyncio
import copy
from pathlib import Path

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster.local.cluster import LocalCluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def _experiment(name: str, **engine: object):
    document = copy.deepcopy(
        yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    )
    document["metadata"]["name"] = name
    spec = document["spec"]
    spec["engine"].update(engine)
    spec["workers"][0]["replicas"] = 2
    spec["routing"] = [{"name": "kv-aware", "router": {"policy": "kv_aware"}}]
    spec["workload"]["sharedPrefix"].update(prefixes=[4], requestsPerPrefix=4, minRequests=24)
    spec["load"].update(concurrency=[4], trials=1)
    spec["execution"] = {"retries": 0}
    return parse_experiment(document)


def _run(experiment, out: Path):
    runner = ExperimentRunner(experiment, LocalCluster(out / "work"), DirectoryStore(out))
    [record] = asyncio.run(runner.run()).records
    return record


def test_a_kv_aware_run_records_the_batches_from_every_worker(tmp_path: Path) -> None:
    record = _run(_experiment("heard"), tmp_path)
    assert record.error is None, record.error
    print(f"KV event batches recorded: {record.kv_events}")
    assert record.kv_events is not None and set(record.kv_events) == {"gpu-0", "gpu-1"}
    assert all(n > 0 for n in record.kv_events.values()), record.kv_events


def test_workers_that_publish_nothing_fail_the_kv_aware_run(tmp_path: Path) -> None:
    """Prefix caching off: the workers store no blocks, so they publish no KV event, and the
    router routes on load alone."""
    record = _run(_experiment("deaf", enablePrefixCaching=False), tmp_path)
    assert record.error_reason == "NoKvEvents", record.error
    [failure] = record.failed_attempts
    assert "gpu-0: 0" in failure.message and "gpu-1: 0" in failure.message
    assert failure.raw_results is not None, "the void window's result is kept as evidence"
    assert record.summary.requests == 0, "no figures from it"
