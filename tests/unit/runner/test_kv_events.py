"""What a kv_aware router received, read after the window: the log lines counted per worker,
the workers it never heard from, the runner's verdict (`NoKvEvents`, retried, never a good
record) and the local back end's reading of its router's log."""

import asyncio
from pathlib import Path

import pytest
import yaml
from fake_cluster import FakeCluster

from kvbench.api import parse_experiment
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.results import CounterReport, LoadgenResult
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster.base import ChildNames, WorkerInfo
from kvbench.runner.cluster.kv_events import (
    KvEventFeed,
    kv_event_batches,
    router_log_filter,
    silent_publishers,
)
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]
BATCH = "\x1b[2m2026-12-02\x1b[0m DEBUG kv_index live sequence advanced source={} rank=0 seq={}\n"


def _experiment(*policies: str):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["workload"]["sharedPrefix"]["prefixes"] = [7]
    document["spec"]["load"]["trials"] = 1
    document["spec"]["routing"] = [
        {"name": p.replace("_", "-"), "router": {"policy": p}} for p in policies
    ]
    return parse_experiment(document)


def _workers(n: int) -> list[WorkerInfo]:
    return [
        WorkerInfo(name=f"w{i}", pool="gpu", base_url=f"http://127.0.9.{i}:8000", metrics_url="m")
        for i in range(n)
    ]


def test_batches_are_counted_per_worker_from_the_routers_last_start() -> None:
    workers = _workers(3)
    log = (
        BATCH.format(workers[2].base_url, 0)  # an earlier start of the router
        + "\x1b[32m INFO\x1b[0m vllm_router_rs::server: Starting router on 127.0.9.9:8000\n"
        + "".join(BATCH.format(workers[0].base_url, s) for s in range(3))
        + BATCH.format(workers[1].base_url, 0)
        + BATCH.format("http://127.0.9.77:8000", 0)  # no worker of this run
        + "WARN kv_index decode batch: invalid MessagePack\n"  # rejected: not received
    )
    assert kv_event_batches(log, workers) == {"w0": 3, "w1": 1, "w2": 0}
    assert kv_event_batches("", workers) == {"w0": 0, "w1": 0, "w2": 0}


def test_the_log_filter_adds_the_subscriber_to_the_asked_level() -> None:
    subscriber = "vllm_router_rs::kv_index::subscriber"
    assert router_log_filter([]) == f"vllm_router_rs=info,{subscriber}=debug"
    assert router_log_filter(["--log-level", "debug"]) == f"vllm_router_rs=debug,{subscriber}=debug"
    assert router_log_filter(["--log-level=trace"]) == f"vllm_router_rs=trace,{subscriber}=trace"


def test_the_feed_gives_the_router_every_source_and_the_identity() -> None:
    feed = KvEventFeed(
        endpoints={"http://a:1": "tcp://a:5", "http://b:1": "tcp://b:5"}, block_size=16, model="m"
    )
    assert feed.router_args() == [
        "--kv-event-source", "http://a:1=tcp://a:5",
        "--kv-event-source", "http://b:1=tcp://b:5",
        "--kv-event-block-size", "16",
        "--kv-event-model", "m",
    ]  # fmt: skip


def test_a_worker_the_router_never_chose_is_not_silent() -> None:
    """It stored nothing, so it had nothing to publish; one that served and was never heard
    from is, and so is one the counters do not know."""
    pods = [PodDelta(pod="w0", requests=10), PodDelta(pod="w1", requests=0)]
    result = LoadgenResult.model_construct(counters=CounterReport(source="direct", pods=pods))
    assert silent_publishers({"w0": 0, "w1": 0, "w2": 0}, result) == ["w0", "w2"]
    assert silent_publishers({"w0": 4, "w1": 0, "w2": 1}, result) == []


def _run(experiment, cluster, tmp_path: Path):
    return asyncio.run(ExperimentRunner(experiment, cluster, DirectoryStore(tmp_path)).run())


def test_a_deaf_kv_aware_window_is_retried_and_the_good_one_records_its_batches(
    tmp_path: Path,
) -> None:
    result = _run(_experiment("kv_aware"), FakeCluster(deaf_loads={1}), tmp_path)
    [record] = result.records
    assert record.attempt == 2 and record.error is None
    [deaf] = record.failed_attempts
    assert deaf.reason == "NoKvEvents"
    assert "no KV events from w0, w1, w2, w3, w4, w5" in deaf.message
    assert deaf.raw_results == "raw/r0-a1.json.gz", "the void window's result is kept"
    assert record.kv_events == {f"w{i}": 3 for i in range(6)}


def test_a_kv_aware_run_never_heard_is_recorded_failed(tmp_path: Path) -> None:
    experiment = _experiment("kv_aware")
    experiment.spec.execution.retries = 0
    result = _run(experiment, FakeCluster(deaf_loads={1}), tmp_path)
    [record] = result.failed
    assert record.error_reason == "NoKvEvents"


def test_other_arms_record_no_kv_events(tmp_path: Path) -> None:
    result = _run(_experiment("cache_aware"), FakeCluster(deaf_loads={1}), tmp_path)
    [record] = result.records
    assert record.attempt == 1 and record.kv_events is None


def test_a_router_kept_across_runs_is_checked_by_the_names_it_was_opened_with(
    tmp_path: Path,
) -> None:
    """With caches reset between runs the router of run 0 serves run 1 too: its KV events
    are read from that router, not looked for under run 1's names (which name no router)."""

    class Recording(FakeCluster):
        checked: list[str] = []

        async def check_arm(self, arm, workers, names):
            self.checked.append(names.arm)
            return await super().check_arm(arm, workers, names)

    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["workload"]["sharedPrefix"]["prefixes"] = [7]
    spec["load"]["trials"] = 2
    spec["routing"] = [{"name": "kv-aware", "router": {"policy": "kv_aware"}}]
    spec["freshness"] = "reset-cache"
    spec["engine"]["env"] = [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]
    experiment = parse_experiment(document)
    cluster = Recording()
    result = _run(experiment, cluster, tmp_path)
    assert len(result.records) == 2 and not result.failed
    assert cluster.calls.count("open:kv-aware") == 1, "one router for both runs"
    opened_as = ChildNames(experiment=experiment.metadata.name, index=0, attempt=1).arm
    assert cluster.checked == [opened_as, opened_as]


def _arm(policy: str):
    return _experiment(policy).spec.routing[0]


def test_the_local_back_end_counts_its_routers_log(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    names = ChildNames(experiment="kv", index=0, attempt=1)
    workers = _workers(2)
    log = "Starting router on x\n" + BATCH.format(workers[1].base_url, 0) * 2
    router = cluster.children.spawn(
        names.arm, "arm", ["printf", "%s", log], tmp_path / "logs" / f"{names.arm}.log"
    )
    assert asyncio.run(cluster.children.wait_exit(router, 30))
    counted = asyncio.run(cluster.check_arm(_arm("kv_aware"), workers, names))
    assert counted == {"w0": 0, "w1": 2}
    assert asyncio.run(cluster.check_arm(_arm("cache_aware"), workers, names)) is None
    other = names.model_copy(update={"attempt": 2})
    with pytest.raises(RuntimeError, match="router is gone"):
        asyncio.run(cluster.check_arm(_arm("kv_aware"), workers, other))
