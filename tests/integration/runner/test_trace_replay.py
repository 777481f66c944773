"""Trace replay on the local back end: the replay keeps the trace's prefix structure (the
simulator's hit tokens are exactly the hash-id overlap the trace implies), and the example
runs end to end with the trace's sha256 in every record."""

import hashlib
from pathlib import Path

import pytest

from conftest import ROOT, run_experiment
from kvbench.api import load_experiment, parse_experiment
from kvbench.loadgen.workload.mooncake import TraceRow
from kvbench.loadgen.workload.trace_source import load_trace
from kvbench.runner import aggregate

pytestmark = pytest.mark.slow

TRACE = ROOT / "examples" / "traces" / "small-mooncake.jsonl"
VLLM_BLOCK = 16  # the simulator's (and vLLM's default) KV block size, in tokens
BLOCK = 512  # tokens per hash id


def _blocks(row: TraceRow) -> list[tuple[int, int]]:
    """(hash id, tokens) of each block of the row's prompt: 512 each, the last cut."""
    sizes = [BLOCK] * (len(row.hash_ids) - 1)
    sizes.append(row.input_length - BLOCK * (len(row.hash_ids) - 1))
    return list(zip(row.hash_ids, sizes, strict=True))


def _shared_tokens(row: TraceRow, earlier: TraceRow) -> int:
    """Prompt tokens two rows share from the start: equal ids are equal blocks, a block cut
    short in either ends what they share."""
    shared = 0
    for (a, size_a), (b, size_b) in zip(_blocks(row), _blocks(earlier), strict=False):
        if a != b:
            break
        shared += min(size_a, size_b)
        if size_a != size_b:
            break
    return shared


def expected_cached_tokens(rows: list[TraceRow]) -> list[int]:
    """What vLLM's prefix cache hits for each row sent one after another with nothing evicted
    (`get_computed_blocks`): the longest prefix shared with any earlier row, in whole blocks
    of 16 tokens, and never the prompt's last token (at most (n - 1) // 16 blocks)."""
    hits = []
    for i, row in enumerate(rows):
        overlap = max((_shared_tokens(row, earlier) for earlier in rows[:i]), default=0)
        hits.append(min(overlap // VLLM_BLOCK, (row.input_length - 1) // VLLM_BLOCK) * VLLM_BLOCK)
    return hits


def _one_worker(rows: int, warmups: int) -> dict:
    return {
        "apiVersion": "kvbench.io/v1alpha1",
        "kind": "BenchmarkExperiment",
        "metadata": {"name": "trace-exact"},
        "spec": {
            "engine": {
                "model": "Qwen/Qwen3-0.6B",
                "maxModelLen": 4096,
                "kvCacheMemoryBytes": 16 << 30,  # ~150,000 tokens: nothing is evicted
                "gpuMemoryUtilization": 0.01,
            },
            "workers": [
                {"name": "gpu", "replicas": 1, "simulation": {"profile": "qwen3-0.6b-24gb"}}
            ],
            "routing": [{"name": "service", "service": {}}],
            "workload": {
                "trace": {"file": str(TRACE), "timing": "closed", "maxRows": rows},
            },
            "load": {"concurrency": [1], "trials": 1, "seed": 7, "warmup": {"requests": warmups}},
        },
    }


def test_the_expected_hits_follow_the_hash_ids() -> None:
    """The test's own formula, on rows small enough to check by hand."""

    def row(n_in: int, ids: list[int]) -> TraceRow:
        return TraceRow(timestamp=0, input_length=n_in, output_length=1, hash_ids=tuple(ids))

    rows = [
        row(1000, [1, 2]),
        row(1500, [1, 2, 3]),
        row(600, [1, 4]),
        row(1024, [1, 2]),
        row(9, [5]),
    ]
    # row 2 shares row 1's 1000 tokens (block 2 cut to 488 there); row 3 block 1 (512); row 4
    # shares row 2's 1024 tokens, capped at (1024 - 1) // 16 = 63 blocks; row 5 nothing
    assert expected_cached_tokens(rows) == [0, 992, 512, 1008, 0]


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    experiment = parse_experiment(_one_worker(rows=60, warmups=5))
    replay = experiment.spec.workload.trace
    assert replay is not None
    trace = load_trace(replay, TRACE)
    return run_experiment(experiment, tmp_path_factory.mktemp("trace-exact"), trace=trace), trace


def test_hit_tokens_equal_the_overlap_the_trace_implies(exact) -> None:
    ran, trace = exact
    [record] = ran.records
    sent = ran.result(record).records()
    assert [r.phase for r in sent] == ["warmup"] * 5 + ["measured"] * 55
    assert all(r.ok for r in sent)
    expected = expected_cached_tokens(list(trace.rows))
    assert [r.prompt_tokens for r in sent] == [row.input_length for row in trace.rows]
    assert [r.cached_tokens for r in sent] == expected
    # not trivial: most rows hit, and some hit a repeated prompt's partial last block
    assert sum(1 for hit in expected if hit) > 30 and any(hit % BLOCK for hit in expected)
    assert sum(p.preemptions for p in record.pods) == 0


def test_the_record_names_the_trace_replayed(exact) -> None:
    ran, trace = exact
    [record] = ran.records
    assert record.trace == trace.info and record.trace.rows == 60
    conditions = ran.result(record).conditions
    assert conditions.trace == trace.info and conditions.workload == "trace"
    assert conditions.schedule == "closed" and conditions.measured_requests == 55
    assert record.trace.sha256 == hashlib.sha256(TRACE.read_bytes()).hexdigest()


def test_the_example_replays_its_trace_on_six_workers(tmp_path: Path) -> None:
    experiment = load_experiment(ROOT / "examples" / "trace-replay.yaml")
    replay = experiment.spec.workload.trace
    assert replay is not None and replay.file == str(TRACE)  # read from the file's directory
    trace = load_trace(replay, Path(replay.file))
    ran = run_experiment(experiment, tmp_path, trace=trace)
    points = {p.arm: p for p in aggregate(experiment.spec, ran.records)}
    for record in ran.records:
        assert record.summary.requests == 200 and record.summary.errors == 0
        assert ran.result(record).conditions.schedule == "scheduled"
        assert record.trace is not None and record.trace.sha256 == trace.sha256
    service, affinity = points["service"].token_hit_rate, points["affinity"].token_hit_rate
    assert service is not None and affinity is not None
    assert affinity > service + 0.05, (service, affinity)
