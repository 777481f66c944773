"""vllm-router's kv_aware policy on the local back end, following the simulators' KV events.

Three workers of article 002 (1 GiB of KV each, ~3.95 requests of 2,371 tokens), 12 prefixes,
text prompts, concurrency 8: the same request sequence through the Service stand-in, through
kv_aware and through cache_aware. kv_aware must send a prefix back to the worker that holds
it, which the Service's random choice cannot.
"""

import copy
import re
from pathlib import Path

import pytest
import yaml

from kvbench.api import parse_experiment

ROOT = Path(__file__).resolve().parents[3]
ARMS = [
    {"name": "service", "service": {}},
    {"name": "kv-aware", "router": {"policy": "kv_aware", "extraArgs": ["--log-level", "debug"]}},
    {"name": "cache-aware", "router": {"policy": "cache_aware"}},
]


@pytest.fixture(scope="module")
def kv_aware_run(tmp_path_factory, run_local):
    name = "prefix-cache-service-3-workers.yaml"
    document = copy.deepcopy(yaml.safe_load((ROOT / "examples" / name).read_text()))
    spec = document["spec"]
    spec["routing"] = ARMS
    spec["workload"]["promptFormat"] = "text"
    spec["workload"]["sharedPrefix"]["prefixes"] = [12]
    spec["load"].update(concurrency=[8], trials=1)
    return run_local(parse_experiment(document), tmp_path_factory.mktemp("kv-aware"))


def _hit_rate(ran, arm: str) -> float:
    record = ran.point(arm)
    assert record.summary.errors == 0
    return record.summary.request_hit_rate


def test_kv_aware_sends_prefixes_to_the_worker_that_holds_them(kv_aware_run) -> None:
    service, kv_aware = _hit_rate(kv_aware_run, "service"), _hit_rate(kv_aware_run, "kv-aware")
    assert service < 0.45  # the capacity model's min(1, 3.95 / 12), give or take
    assert kv_aware > service + 0.2, f"kv_aware {kv_aware:.3f} vs service {service:.3f}"


def test_router_received_kv_events_and_credited_cached_prefixes(kv_aware_run) -> None:
    names = kv_aware_run.names(kv_aware_run.point("kv-aware"))
    log = kv_aware_run.work / "logs" / f"{names.arm}.log"
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    assert "kv_index live sequence advanced" in text
    assert "decode batch" not in text  # no KV event batch was rejected
    credited = [int(n) for n in re.findall(r"credited_prefix_tokens=(\d+)", text)]
    assert credited and sum(n > 0 for n in credited) > len(credited) / 2
