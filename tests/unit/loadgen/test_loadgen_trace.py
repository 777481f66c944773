"""Trace replay: Mooncake rows read and checked line by line, prompts made block by block from
the hash ids, the timing the trace says, and the sha256 the load generator checks."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from kvbench.api import load_experiment
from kvbench.api.load import Warmup
from kvbench.api.status import Point
from kvbench.api.workload import TraceInfo, TraceWorkload, Workload
from kvbench.cli import main
from kvbench.loadgen.arrivals import measured_schedule
from kvbench.loadgen.config import RunConfig, TokenSpace
from kvbench.loadgen.workload import build_sequence
from kvbench.loadgen.workload.mooncake import Trace, TraceError, parse_trace
from kvbench.loadgen.workload.synthetic_trace import TraceShape, synthetic_trace, trace_lines
from kvbench.loadgen.workload.tokens import render_text
from kvbench.loadgen.workload.trace import TraceBlocks
from kvbench.loadgen.workload.trace_source import join_keys, read_trace_bytes, replayed_trace

SPACE = TokenSpace()
EXAMPLE_TRACE = Path(__file__).resolve().parents[3] / "examples" / "traces" / "small-mooncake.jsonl"
SPEC = TraceWorkload(file="t.jsonl", block_tokens=4)


def _line(timestamp: float, n_in: int, ids: list[int], n_out: int = 3, **extra) -> str:
    row = {"timestamp": timestamp, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
    return json.dumps({**row, **extra})


ROWS = [
    _line(0, 10, [1, 2, 3]),  # blocks of 4, 4, 2
    _line(250, 8, [1, 2]),  # a prefix of row 1's first two blocks
    _line(250, 13, [1, 2, 3, 4]),  # row 1 extended: block 3 now full
    _line(1000, 5, [7, 8]),  # another chain
    _line(1500, 4, [7]),
]
DATA = ("\n".join(ROWS) + "\n").encode()


def _trace(data: bytes = DATA, spec: TraceWorkload = SPEC) -> Trace:
    return parse_trace(data, spec, "t.jsonl")


def _workload(fmt: str = "token-ids", **trace) -> Workload:
    return Workload.model_validate(
        {"promptFormat": fmt, "trace": {"file": "t.jsonl", "blockTokens": 4, **trace}}
    )


def _sequence(seed: int = 1, warmups: int = 0, fmt: str = "token-ids", **trace):
    workload = _workload(fmt, **trace)
    assert workload.trace is not None
    data = _trace(spec=workload.trace)
    warmup = Warmup(requests=warmups)
    return build_sequence(workload, Point(concurrency=4), seed, warmup, SPACE, data)


def test_rows_are_read_with_the_whole_files_sha256() -> None:
    trace = _trace(b"\n" + DATA + b"\n\n")  # blank lines are skipped
    assert len(trace.rows) == 5 and trace.rows[2].hash_ids == (1, 2, 3, 4)
    assert trace.info == TraceInfo(
        source="t.jsonl",
        sha256=hashlib.sha256(b"\n" + DATA + b"\n\n").hexdigest(),
        rows=5,
        input_tokens=8,  # (10 + 8 + 13 + 5 + 4) / 5
        output_tokens=3,
        seconds=1.5,
    )
    assert trace.lines == (2, 3, 4, 5, 6)
    assert trace.rows[0].block_lengths(4) == [4, 4, 2]


def test_max_rows_reads_the_first_rows_only() -> None:
    spec = SPEC.model_copy(update={"max_rows": 2})
    assert len(_trace(DATA + b"not json\n", spec).rows) == 2


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [1, 2, 3]}', "output_length: Field"),
        (
            _line(0, 10, [1, 2]),
            "hash_ids has 2 ids; input_length 10 in blocks of 4 tokens needs ceil(10 / 4) = 3",
        ),
        (_line(0, 8, [1, 2, 3]), "hash_ids has 3 ids; input_length 8"),
        (_line(0, 10, [1, -2, 3]), "hash_ids[1]: Input should be greater than or equal to 0"),
        (_line(-1, 10, [1, 2, 3]), "timestamp: Input should be greater than or equal to 0"),
        (_line(0, 0, []), "input_length: Input should be greater than or equal to 1"),
        (_line(0, 10, [1, 2, 3], n_out=0), "output_length: Input should be greater than"),
        (_line(0, 10, [1, 2, 3], session_id="a"), "session_id: unknown field"),
        (
            '{"timestamp": 0, "input_length": "10", "output_length": 3, "hash_ids": [1, 2, 3]}',
            "input_length: Input should be a valid integer",
        ),
        ("[1, 2]", "not a JSON object"),
        ('{"timestamp": 0,', "Invalid JSON"),
        (_line(1400, 4, [9]), "timestamp 1400 is before the previous row's 1500"),
    ],
)
def test_a_bad_row_is_refused_with_its_line(line: str, problem: str) -> None:
    with pytest.raises(TraceError) as caught:
        _trace(DATA + b"\n" + line.encode() + b"\n")
    assert str(caught.value).startswith("t.jsonl line 7: "), caught.value
    assert problem in str(caught.value)


def test_an_empty_trace_is_refused() -> None:
    with pytest.raises(TraceError, match="no rows"):
        _trace(b"\n\n")


def test_equal_hash_ids_are_equal_blocks_and_different_ids_differ() -> None:
    seq = _sequence()
    first, prefix, extended, other, single = (r.prompt for r in seq.measured)
    assert prefix == first[:8]  # [1, 2] is row 1's first two blocks
    assert extended[:10] == first  # block 3 cut to 2 tokens in row 1, whole in row 3
    assert len({first[:4], first[4:8], extended[8:12], extended[12:], other[:4]}) == 5
    assert single == other[:4]
    blocks = TraceBlocks(1, 4, SPACE)
    assert first[:4] == blocks.block(1) and other[4:] == blocks.block(8)[:1]


def test_token_prompts_have_the_rows_lengths_exactly() -> None:
    seq = _sequence()
    rows = _trace().rows
    assert [len(r.prompt) for r in seq.measured] == [row.input_length for row in rows]
    assert [r.prompt_tokens for r in seq.measured] == [row.input_length for row in rows]
    assert [r.max_tokens for r in seq.measured] == [row.output_length for row in rows]
    assert all(lo <= t < hi for r in seq.measured for t in r.prompt for lo, hi in [(1000, 30000)])


def test_text_prompts_render_the_same_blocks_as_words() -> None:
    text, ids = _sequence(fmt="text"), _sequence()
    for as_text, as_ids in zip(text.measured, ids.measured, strict=True):
        assert as_text.prompt == render_text(list(as_ids.prompt))
    first, prefix = text.measured[0].prompt, text.measured[1].prompt
    assert isinstance(first, str) and isinstance(prefix, str)
    assert first.startswith(prefix + " ") and len(prefix.split()) == 8


def test_the_sequence_is_a_function_of_trace_and_seed() -> None:
    a, b, c = _sequence(seed=5), _sequence(seed=5), _sequence(seed=6)
    assert a.measured == b.measured and a.digest == b.digest
    assert c.digest != a.digest and c.measured[0].prompt != a.measured[0].prompt
    assert [r.group for r in c.measured] == [r.group for r in a.measured]
    other = _workload()
    assert other.trace is not None
    changed = DATA.replace(b'"output_length": 3', b'"output_length": 4', 1)
    d = build_sequence(
        other, Point(concurrency=4), 5, Warmup(), SPACE, _trace(changed, other.trace)
    )
    assert d.digest != a.digest


def test_offsets_follow_timestamps_over_speedup_from_the_first_measured_row() -> None:
    seq = _sequence(warmups=1, speedup=2.0)
    assert [r.phase for r in seq.warmup] == ["warmup"] and seq.warmup[0].offset is None
    assert [r.offset for r in seq.measured] == [0.0, 0.0, 0.375, 0.625]
    assert [r.index for r in seq.measured] == [0, 1, 2, 3]
    closed = _sequence(timing="closed")
    assert all(r.offset is None for r in closed.measured)


def test_groups_number_the_first_hash_ids_in_order() -> None:
    seq = _sequence(warmups=1)
    assert [r.group for r in (*seq.warmup, *seq.measured)] == [0, 0, 0, 1, 1]
    assert seq.groups == 2


def test_warm_up_rows_must_leave_rows_to_measure() -> None:
    with pytest.raises(ValueError, match="none left to measure after 5 warm-up rows"):
        _sequence(warmups=5)


def test_a_replay_is_capped_by_the_concurrency_an_injection_is_not() -> None:
    seq = _sequence()
    point = Point(concurrency=2)
    capped = measured_schedule(seq.measured, point, 1, 0.5, capped=True)
    assert capped.kind == "scheduled" and capped.cap == 2
    assert capped.offsets == (0.0, 0.125, 0.125, 0.5, 0.75)  # server seconds x 0.5
    assert measured_schedule(seq.measured, point, 1, 0.5).cap == 5


def test_a_mounted_configmap_reads_its_keys_in_order(tmp_path: Path) -> None:
    mount = tmp_path / "trace"
    (mount / "..2026_01_01").mkdir(parents=True)
    (mount / "chunk-001").write_bytes(DATA[40:])
    (mount / "chunk-000").write_bytes(DATA[:40])
    assert read_trace_bytes(mount) == DATA
    assert join_keys({"chunk-001": b"b", "chunk-000": b"a"}) == b"ab"
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace_bytes(tmp_path / "absent.jsonl")


def test_the_load_generator_refuses_a_trace_that_changed(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(DATA)
    spec = SPEC.model_copy(update={"file": str(path)})
    planned = _trace().info
    assert replayed_trace(spec, planned).rows == _trace().rows
    path.write_bytes(DATA.replace(b'"output_length": 3', b'"output_length": 4', 1))
    with pytest.raises(TraceError, match="the trace changed after the experiment started"):
        replayed_trace(spec, planned)


def test_the_example_trace_is_what_trace_make_writes(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    made = CliRunner().invoke(main, ["trace", "make", str(out)])
    assert made.exit_code == 0, made.output
    assert out.read_bytes() == EXAMPLE_TRACE.read_bytes()
    other = tmp_path / "o.jsonl"
    CliRunner().invoke(main, ["trace", "make", str(other), "--seed", "1", "--rows", "50"])
    assert len(other.read_text().splitlines()) == 50 and other.read_bytes() != out.read_bytes()


def test_the_synthetic_trace_has_shared_chains_extensions_and_repeats() -> None:
    rows = synthetic_trace(TraceShape(), 2026)
    trace = parse_trace(trace_lines(rows).encode(), TraceWorkload(file="t"), "t")  # 512 each
    ids = [row.hash_ids for row in trace.rows]
    assert len({i[0] for i in ids}) == 5  # the five system prompts start every row
    extends = sum(1 for i, a in enumerate(ids) for b in ids[:i] if a[: len(b) - 1] == b[:-1]
                  and len(a) > len(b) > 1 and a[len(b) - 1] != b[-1])  # fmt: skip
    repeats = sum(1 for i, a in enumerate(ids) if a in ids[:i])
    assert extends > 20 and repeats > 5
    stamps = [row.timestamp for row in trace.rows]
    assert stamps == sorted(stamps) and 30_000 < stamps[-1] < 80_000  # about 200 / 4 per s


def test_a_relative_trace_file_is_read_from_the_experiment_files_directory(
    tmp_path: Path,
) -> None:
    document = yaml.safe_load((EXAMPLE_TRACE.parents[1] / "trace-replay.yaml").read_text())
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "replay.yaml"
    document["spec"]["workload"]["trace"]["file"] = "../traces/t.jsonl"
    spec.write_text(yaml.safe_dump(document))
    replay = load_experiment(spec).spec.workload.trace
    assert replay is not None and replay.file == str(tmp_path / "traces" / "t.jsonl")


def test_a_run_config_names_the_trace_of_a_trace_workload_only() -> None:
    target = {"kind": "url", "url": "http://x"}
    base = {"model": "m", "target": target, "point": {"concurrency": 1}, "seed": 1}
    info = _trace().info.model_dump()
    RunConfig.model_validate({**base, "workload": _workload().model_dump(), "trace": info})
    with pytest.raises(ValidationError, match="trace is set for a trace workload, and only"):
        RunConfig.model_validate({**base, "workload": _workload().model_dump()})
    shared = {"sharedPrefix": {"prefixes": [1]}}
    with pytest.raises(ValidationError, match="trace is set for a trace workload, and only"):
        RunConfig.model_validate(
            {**base, "point": {"concurrency": 1, "prefixes": 1}, "workload": shared, "trace": info}
        )
