"""Deriving a sweep's experiments (`kvbench.plan.sweep`): replicas, KV variants, prefixes,
arms, and the errors for input the sweep cannot run."""

import copy
from pathlib import Path

import pytest
import yaml

from kvbench.api import BenchmarkExperiment, load_experiment, parse_experiment
from kvbench.plan import plan_experiment
from kvbench.plan.sweep import (
    SweepError,
    SweepRequest,
    derive_sweep,
    kv_from_bytes,
    kv_from_tokens,
    parse_counts,
    parse_kv_bytes,
    parse_kv_tokens,
)
from kvbench.sim.capacity import compute_capacity
from kvbench.sim.geometry import resolve_geometry

ROOT = Path(__file__).resolve().parents[3]
ARTICLE_002 = ROOT / "examples" / "prefix-cache-service.yaml"
ZIPF = ROOT / "examples" / "prefix-cache-zipf.yaml"


def _article() -> BenchmarkExperiment:
    return load_experiment(ARTICLE_002)


def _edited(edit) -> BenchmarkExperiment:
    document = yaml.safe_load(ARTICLE_002.read_text())
    edit(document)
    return parse_experiment(copy.deepcopy(document))


def _request(**kw) -> SweepRequest:
    base = {"workers": [2, 4], "kv_tokens": [9360, 20480], "prefixes": [2, 12], "pool": "gpu24"}
    return SweepRequest(**(base | kw))


def test_one_experiment_per_worker_count_with_that_many_replicas() -> None:
    """Catches: the worker count not reaching spec.workers (every experiment the file's 4+2)."""
    sweep = derive_sweep(_article(), _request(workers=[6, 2]))
    assert [d.workers for d in sweep.experiments] == [2, 6]
    assert [d.directory for d in sweep.experiments] == ["w2", "w6"]
    for derived in sweep.experiments:
        spec = derived.experiment.spec
        assert [(p.name, p.replicas) for p in spec.workers] == [("gpu24", derived.workers)]
        assert spec.workers[0].simulation.profile == "qwen3-0.6b-24gb"
        assert spec.simulator.mode == "virtual"
    names = [d.experiment.metadata.name for d in sweep.experiments]
    assert names == ["prefix-cache-service-w2", "prefix-cache-service-w6"]


def test_kv_sizes_become_variants_of_exactly_those_tokens() -> None:
    """Catches: a KV variant whose kvCacheMemoryBytes gives the simulator another token count
    than the one asked for (bytes per token or the block rounding wrong)."""
    sweep = derive_sweep(_article(), _request(kv_tokens=[4096, 9360, 20000]))
    spec = sweep.experiments[0].experiment.spec
    assert spec.variant_names() == ["kv4096", "kv9360", "kv20000"]
    geometry = resolve_geometry(spec.engine.model)
    for name, engine in spec.engines().items():
        capacity = compute_capacity(
            geometry,
            block_size=engine.block_tokens,
            max_model_len=engine.max_model_len,
            kv_cache_memory_bytes=engine.kv_cache_memory_bytes,
            gpu_memory_bytes=0,
            gpu_memory_utilization=1.0,
            non_kv_overhead_bytes=0,
        )
        assert f"kv{capacity.num_tokens}" == name


def test_token_sizes_round_up_to_whole_blocks_and_bytes_round_down() -> None:
    """Catches: k read as 1000 (4k would be 4000 tokens, under maxModelLen 4096), and a byte
    size reported with tokens that are not whole blocks."""
    assert parse_kv_tokens("4k,9360,20k") == [4096, 9360, 20480]
    engine = _article().spec.engine
    assert kv_from_tokens(engine, 9361).tokens == 9376
    assert kv_from_bytes(engine, 1 << 30).tokens == 9360  # article 002's "about 9,360 tokens"
    assert parse_kv_bytes("512Mi,1Gi") == [512 << 20, 1 << 30]


def test_prefixes_and_arms_are_the_plan_axes() -> None:
    """Catches: --prefixes not replacing the file's points, or an arm missing from the plan
    (the file has only a Service: affinity must be added)."""
    sweep = derive_sweep(_article(), _request(prefixes=[48, 2, 6]))
    spec = sweep.experiments[0].experiment.spec
    assert spec.workload.shared_prefix.prefixes == [2, 6, 48]
    assert [(a.name, a.kind) for a in spec.routing] == [
        ("service", "service"),
        ("affinity", "prefix_affinity"),
    ]
    assert sweep.arms == {"service": "service", "affinity": "affinity"}
    plan = plan_experiment(sweep.experiments[0].experiment)
    assert len(plan.runs) == sweep.runs // 2 == 2 * 2 * 3 * 1 * 3  # kv x arms x p x c x trials
    assert {r.point.concurrency for r in plan.runs} == {16}  # the file's highest


def test_the_files_own_arms_are_kept_and_routers_left_out() -> None:
    """Catches: the zipf file's router arms run in virtual time (refused there) or its own
    affinity arm renamed, so its results no longer read as that arm."""
    sweep = derive_sweep(load_experiment(ZIPF), SweepRequest(workers=[2], prefixes=[4, 24]))
    spec = sweep.experiments[0].experiment.spec
    assert [a.name for a in spec.routing] == ["service", "affinity"]
    assert sweep.notes == [
        "arms left out: cache-aware, kv-aware (the sweep runs service, affinity)"
    ]
    assert spec.variant_names() == ["kv9360"]  # the file's 1Gi
    assert sweep.experiments[0].experiment.metadata.annotations == {}


def test_options_override_load() -> None:
    """Catches: --concurrency or --trials ignored."""
    sweep = derive_sweep(_article(), _request(concurrency=3, trials=2, arms=["service"]))
    load = sweep.experiments[0].experiment.spec.load
    assert (load.concurrency, load.trials) == ([3], 2)
    assert [a.name for a in sweep.experiments[0].experiment.spec.routing] == ["service"]


@pytest.mark.parametrize(
    ("arms", "message"),
    [
        (["kv-aware"], "virtual time does not model"),
        (["router"], "real process"),
        (["dynamo"], "real processes"),
        (["round-robin"], "not an arm the sweep runs"),
        (["service", "service"], "twice"),
        ([], "at least 1"),
    ],
)
def test_arms_refused(arms: list[str], message: str) -> None:
    """Catches: a router arm or a typo accepted, to fail only after minutes of runs."""
    with pytest.raises(ValueError, match=message):
        _request(arms=arms)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: parse_counts("", "--workers", 256), "comma-separated"),
        (lambda: parse_counts("2,,4", "--workers", 256), "no empty entries"),
        (lambda: parse_counts("0,2", "--workers", 256), "from 1 to 256"),
        (lambda: parse_counts("2,x", "--workers", 256), "'x'"),
        (lambda: parse_counts("2,02", "--workers", 256), "twice"),
        (lambda: parse_kv_tokens("4q"), "not a token count"),
        (lambda: parse_kv_tokens("0"), "between 1"),
        (lambda: parse_kv_bytes("1.5"), "whole number of bytes"),
        (lambda: parse_kv_bytes("-1Gi"), "quantity"),
    ],
)
def test_nonsense_lists_refused(call, message: str) -> None:
    """Catches: empty, zero, negative or fractional sizes and counts passed on to the runs."""
    with pytest.raises(SweepError, match=message):
        call()


def test_file_problems_refused_with_the_field_to_change() -> None:
    """Catches: several pools silently summed or dropped, a KV size under maxModelLen, a
    file with variants, both KV options, a workload without prefixes."""
    with pytest.raises(SweepError, match=r"2 pools .*--pool"):
        derive_sweep(_article(), _request(pool=None))
    with pytest.raises(SweepError, match="no such pool"):
        derive_sweep(_article(), _request(pool="gpu99"))
    with pytest.raises(SweepError, match=r"fewer than one request of .*maxModelLen"):
        derive_sweep(_article(), _request(kv_tokens=[2000]))
    with pytest.raises(SweepError, match="one of the two"):
        derive_sweep(_article(), _request(kv_bytes=[1 << 30]))
    with pytest.raises(SweepError, match="given twice"):
        derive_sweep(_article(), _request(kv_tokens=[9350, 9360]))

    def variants(doc):
        doc["spec"]["variants"] = [{"name": "a", "engine": {"maxNumSeqs": 8}}]

    with pytest.raises(SweepError, match=r"spec\.variants"):
        derive_sweep(_edited(variants), _request())

    def no_kv(doc):
        del doc["spec"]["engine"]["kvCacheMemoryBytes"]

    with pytest.raises(SweepError, match="--kv-tokens or --kv-bytes"):
        derive_sweep(_edited(no_kv), _request(kv_tokens=None))

    def unknown_model(doc):
        doc["spec"]["engine"]["model"] = "acme/unheard-of"

    with pytest.raises(SweepError, match="no geometry"):
        derive_sweep(_edited(unknown_model), _request())


def test_a_workload_without_shared_prefixes_is_refused() -> None:
    """Catches: a conversation workload swept with no prefix axis (an empty table after
    minutes of runs)."""
    with pytest.raises(SweepError, match="sharedPrefix"):
        derive_sweep(
            load_experiment(ROOT / "examples" / "multi-turn.yaml"), SweepRequest(workers=[2])
        )
