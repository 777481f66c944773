"""vllm-router's kv_aware policy on the local back end, following the simulators' KV events.

Three workers of article 002 (1 GiB of KV each, ~3.95 requests of 2,371 tokens), 12 prefixes,
text prompts, concurrency 8: the same request sequence through the Service stand-in, through
kv_aware and through cache_aware. kv_aware must send a prefix back to the worker that holds
it, which the Service's random choice cannot.
"""

import asyncio
import copy
import re
from pathlib import Path

import pytest
import yaml

from kvbench.api import RunRecord, parse_experiment
from kvbench.runner import ExperimentRunner, ResultsStore
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]
ARMS = [
    {"name": "service", "service": {}},
    {"name": "kv-aware", "router": {"policy": "kv_aware", "extraArgs": ["--log-level", "debug"]}},
    {"name": "cache-aware", "router": {"policy": "cache_aware"}},
]


@pytest.fixture(scope="module")
def kv_aware_run(tmp_path_factory) -> tuple[list[RunRecord], Path]:
    name = "prefix-cache-service-3-workers.yaml"
    document = copy.deepcopy(yaml.safe_load((ROOT / "examples" / name).read_text()))
    spec = document["spec"]
    spec["routing"] = ARMS
    spec["workload"]["promptFormat"] = "text"
    spec["workload"]["sharedPrefix"]["prefixes"] = [12]
    spec["load"].update(concurrency=[8], trials=1)
    out = tmp_path_factory.mktemp("kv-aware")
    runner = ExperimentRunner(
        parse_experiment(document), LocalCluster(out / "work"), ResultsStore(out)
    )
    return asyncio.run(runner.run()), out / "work" / "logs" / "router-kv-aware.log"


def _hit_rate(records: list[RunRecord], arm: str) -> float:
    [record] = [r for r in records if r.arm == arm]
    assert record.summary.errors == 0
    return record.summary.request_hit_rate


def test_kv_aware_sends_prefixes_to_the_worker_that_holds_them(kv_aware_run) -> None:
    records, _log = kv_aware_run
    service, kv_aware = _hit_rate(records, "service"), _hit_rate(records, "kv-aware")
    assert service < 0.45  # the capacity model's min(1, 3.95 / 12), give or take
    assert kv_aware > service + 0.2, f"kv_aware {kv_aware:.3f} vs service {service:.3f}"


def test_router_received_kv_events_and_credited_cached_prefixes(kv_aware_run) -> None:
    _records, log = kv_aware_run
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    assert "kv_index live sequence advanced" in text
    assert "decode batch" not in text  # no KV event batch was rejected
    credited = [int(n) for n in re.findall(r"credited_prefix_tokens=(\d+)", text)]
    assert credited and sum(n > 0 for n in credited) > len(credited) / 2
