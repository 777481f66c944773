"""The planner: order, ids, counts and request seeds are deterministic and arm-independent."""

import copy
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kvbench.api import BenchmarkExperiment, load_experiment, parse_experiment
from kvbench.api.workload import TraceInfo
from kvbench.cli import main
from kvbench.loadgen.workload.trace_source import load_trace
from kvbench.plan import plan_experiment, points_of, sequence_seed

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "bench" / "real-vllm-experiments").glob("*.yaml")
)
KV_AWARE = ROOT / "examples" / "prefix-cache-kv-aware.yaml"
TRACE_EXAMPLE = ROOT / "examples" / "trace-replay.yaml"


def _trace_of(experiment: BenchmarkExperiment) -> TraceInfo | None:
    replay = experiment.spec.workload.trace
    if replay is None or replay.file is None:
        return None
    return load_trace(replay, Path(replay.file)).info


def test_article_002_grid_has_36_runs_in_order() -> None:
    plan = plan_experiment(load_experiment(ROOT / "examples" / "prefix-cache-service.yaml"))
    assert len(plan.runs) == 4 * 3 * 3
    assert [r.index for r in plan.runs] == list(range(36))
    assert plan.runs[0].id == "default.service.p2-c4.t1"
    assert plan.runs[1].id == "default.service.p2-c4.t2"
    assert plan.runs[3].id == "default.service.p2-c8.t1"
    assert plan.runs[-1].id == "default.service.p24-c16.t3"
    by_prefixes = {r.point.prefixes: r.measured_requests for r in plan.runs}
    assert by_prefixes == {2: 200, 7: 200, 12: 240, 24: 480}
    assert all(r.warmup_requests == r.point.prefixes for r in plan.runs)


def test_plan_is_deterministic() -> None:
    first = plan_experiment(load_experiment(KV_AWARE))
    second = plan_experiment(load_experiment(KV_AWARE))
    assert first.model_dump() == second.model_dump()
    assert len({r.id for r in first.runs}) == len(first.runs)


def test_request_sequence_is_the_same_in_every_arm_and_variant() -> None:
    plan = plan_experiment(load_experiment(ROOT / "examples" / "max-num-seqs.yaml"))
    seeds: dict[tuple[str, int], set[int]] = {}
    for run in plan.runs:
        seeds.setdefault((run.point.key, run.trial), set()).add(run.seed)
    assert all(len(s) == 1 for s in seeds.values())
    arms = plan_experiment(load_experiment(KV_AWARE))
    for (point, trial), group in _group(arms.runs).items():
        assert len({r.seed for r in group}) == 1, (point, trial)
        assert {r.arm for r in group} == {"service", "cache-aware", "kv-aware", "affinity"}


def _group(runs):
    groups: dict[tuple[str, int], list] = {}
    for run in runs:
        groups.setdefault((run.point.key, run.trial), []).append(run)
    return groups


def test_trials_and_points_get_different_sequences() -> None:
    plan = plan_experiment(load_experiment(KV_AWARE))
    assert len({r.seed for r in plan.runs}) == 3 * 3
    assert sequence_seed(1, plan.runs[0].point, 1) != sequence_seed(2, plan.runs[0].point, 1)


def test_variants_are_the_outer_loop() -> None:
    plan = plan_experiment(load_experiment(ROOT / "examples" / "chunk-size.yaml"))
    variants = [r.variant for r in plan.runs]
    assert variants == sorted(variants, key=variants.index)
    assert variants[:3] == ["chunk-512"] * 3
    assert all(r.measured_requests == 4 for r in plan.runs)


def test_open_loop_rates_multiply_points() -> None:
    document = yaml.safe_load((ROOT / "examples" / "concurrency-sweep.yaml").read_text())
    document = copy.deepcopy(document)
    document["spec"]["load"].update(concurrency=[8, 16], requestRates=[1.0, 2.5])
    points = points_of(parse_experiment(document).spec)
    assert [p.key for p in points] == ["r1-c8", "r1-c16", "r2.5-c8", "r2.5-c16"]


def test_estimate_grows_with_requests() -> None:
    plan = plan_experiment(load_experiment(ROOT / "examples" / "prefix-cache-service.yaml"))
    by_point = {r.point.key: r.estimated_seconds for r in plan.runs}
    assert by_point["p24-c4"] > by_point["p2-c4"] > 0
    assert by_point["p24-c16"] < by_point["p24-c4"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_plans(example: Path) -> None:
    result = CliRunner().invoke(main, ["plan", str(example)])
    assert result.exit_code == 0, result.output
    experiment = load_experiment(example)
    plan = plan_experiment(experiment, trace=_trace_of(experiment))
    assert f"{len(plan.runs)} runs" in result.output


def test_a_trace_is_planned_per_concurrency_with_its_rows() -> None:
    document = yaml.safe_load(TRACE_EXAMPLE.read_text())
    document["spec"]["workload"]["trace"]["file"] = str(ROOT / "examples" / "traces" / "x")
    document["spec"]["load"].update(concurrency=[8, 32], trials=2, warmup={"requests": 20})
    experiment = parse_experiment(document)
    info = TraceInfo(
        source="x", sha256="0" * 64, rows=200, input_tokens=2000, output_tokens=50, seconds=50
    )
    plan = plan_experiment(experiment, trace=info)
    assert [r.id for r in plan.runs[:4]] == [
        "default.service.c8.t1", "default.service.c8.t2",
        "default.service.c32.t1", "default.service.c32.t2",
    ]  # fmt: skip
    assert {(r.warmup_requests, r.measured_requests) for r in plan.runs} == {(20, 180)}
    replayed = [r.estimated_seconds for r in plan.runs if r.point.concurrency == 32]
    assert min(replayed) >= 60 + 50  # a start, then at least the trace's 50 s at speedup 1
    document["spec"]["workload"]["trace"]["speedup"] = 10.0
    faster = plan_experiment(parse_experiment(document), trace=info)
    assert max(r.estimated_seconds for r in faster.runs) < min(replayed)
    with pytest.raises(ValueError, match="planned with its trace"):
        plan_experiment(experiment)


def test_plan_reads_a_trace_given_beside_the_spec(tmp_path: Path) -> None:
    document = yaml.safe_load(TRACE_EXAMPLE.read_text())
    document["spec"]["workload"]["trace"] = {"configMap": {"name": "small-mooncake"}}
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(document))
    refused = CliRunner().invoke(main, ["plan", str(spec)])
    assert refused.exit_code == 1 and "trace.configMap" in refused.output
    trace = ROOT / "examples" / "traces" / "small-mooncake.jsonl"
    planned = CliRunner().invoke(main, ["plan", str(spec), "--trace", str(trace), "--json"])
    assert planned.exit_code == 0, planned.output
    assert '"measured_requests": 200' in planned.output


def test_plan_command_reports_invalid_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    document = yaml.safe_load(KV_AWARE.read_text())
    document["spec"]["load"]["trials"] = 0
    bad.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(main, ["plan", str(bad)])
    assert result.exit_code == 1
    assert "spec.load.trials" in result.output


def test_local_estimate_follows_the_time_scale() -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    default = plan_experiment(parse_experiment(copy.deepcopy(document)))
    document["spec"]["simulator"] = {"timeScale": 0.1}
    slower = plan_experiment(parse_experiment(document))
    assert default.estimated_local_seconds < slower.estimated_local_seconds
    assert slower.estimated_local_seconds < default.estimated_seconds
    overhead = 36 * 3.0
    assert slower.estimated_local_seconds - overhead == pytest.approx(
        2 * (default.estimated_local_seconds - overhead)
    )
