"""Runs a reader must not trust are marked in every cell they feed, in the report and in
`kvbench compare`, and compare warns when the sides ran different conditions."""

import io
from pathlib import Path

from report_builders import example, record, store_of
from rich.console import Console

from kvbench.api import Point
from kvbench.api.workload import TraceInfo
from kvbench.report import compare_table, compare_warnings, render_report, side_of

P7 = Point(prefixes=7, concurrency=8)
P12 = Point(prefixes=12, concurrency=8)


def _text(renderable) -> str:
    console = Console(record=True, width=240, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _flagged_records():
    """p7: trial 2 client-bound, trial 3 with errors and a restarted pod; p12: all clean."""
    return [
        record(0, P7, 1, request_hit_rate=0.5, ttft_p50=0.1, ttft_p99=0.3),
        record(1, P7, 2, request_hit_rate=0.6, ttft_p50=0.1, ttft_p99=0.3, client_bound=True),
        record(2, P7, 3, request_hit_rate=0.7, ttft_p50=0.1, ttft_p99=0.3, errors=4, restarts=1),
        *(
            record(2 + t, P12, t, request_hit_rate=0.3, ttft_p50=0.1, ttft_p99=0.3)
            for t in (1, 2, 3)
        ),
    ]


def _lines(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if key in line]


def test_every_table_marks_the_flagged_trials_behind_its_medians(tmp_path: Path) -> None:
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), _flagged_records())
    console = Console(record=True, width=300, file=io.StringIO())
    render_report(store, console, tmp_path)
    text = console.export_text()
    flagged = "C1/3 E1/3 R1/3"
    # hit rate, TTFT, throughput (row "7"), hit vs miss (row "p7-c8"): each cell of p7 marked
    assert sum(line.count(flagged) for line in text.splitlines()) >= 5
    for line in _lines(text, "│       12 │") + _lines(text, "p12-c8"):
        assert "C1/3" not in line and "E1/" not in line, line
    per_pod = [line for line in text.splitlines() if "w-0" in line or "w-1" in line]
    assert per_pod and all(flagged in line for line in per_pod)
    for words in ("client-bound", "had failed requests", "restarted during the run"):
        assert words in text, words


def test_a_clean_report_has_no_marks_nor_legend(tmp_path: Path) -> None:
    clean = [r for r in _flagged_records() if r.point == P12]
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), clean)
    console = Console(record=True, width=300, file=io.StringIO())
    render_report(store, console, tmp_path)
    text = console.export_text()
    assert "/3" not in text and "do not trust" not in text


def test_columns_that_are_models_say_so_under_the_table(tmp_path: Path) -> None:
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), _flagged_records())
    console = Console(record=True, width=300, file=io.StringIO())
    render_report(store, console, tmp_path)
    text = console.export_text()
    assert "model service: not measured" in text
    assert "model affinity: not measured" in text


def test_compare_carries_the_flags(tmp_path: Path) -> None:
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), _flagged_records())
    a = side_of("A", store, None)
    b = side_of("B", store, None)
    text = _text(compare_table(a, b))
    p7 = _lines(text, "p7-c8")
    assert len(p7) == 1 and p7[0].count("C1/3 E1/3 R1/3") == 8, p7
    assert "C1/3" not in _lines(text, "p12-c8")[0]
    assert "client-bound" in text
    warnings = compare_warnings(a, b)
    assert warnings == [
        "A has runs a reader must not trust: 1 client-bound, 1 with failed requests, "
        "1 with restarted pods",
        "B has runs a reader must not trust: 1 client-bound, 1 with failed requests, "
        "1 with restarted pods",
    ]


def _clean(tmp: Path, experiment, kv_tokens=9360, digest=None, clock="simulated"):
    records = [
        record(t - 1, P7, t, request_hit_rate=0.5, kv_tokens=kv_tokens, latency_clock=clock,
               digest=digest and f"{digest}-{t}")
        for t in (1, 2, 3)
    ]  # fmt: skip
    return side_of(tmp.name, store_of(tmp, experiment, records), None)


def test_compare_says_nothing_when_the_conditions_are_the_same(tmp_path: Path) -> None:
    experiment = example("prefix-cache-service.yaml")
    a = _clean(tmp_path / "a", experiment)
    b = _clean(tmp_path / "b", experiment)
    assert compare_warnings(a, b) == []


def test_compare_warns_on_every_condition_that_differs(tmp_path: Path) -> None:
    base = example("prefix-cache-service.yaml")
    engine = base.spec.engine.to_k8s() | {"maxNumSeqs": 8}
    simulator = {"timeScale": 0.2}
    other = example("prefix-cache-service.yaml", engine=engine, simulator=simulator)
    a = _clean(tmp_path / "a", base)
    b = _clean(tmp_path / "b", other, kv_tokens=12000, digest="sha256:other")
    warnings = compare_warnings(a, b)
    text = "\n".join(warnings)
    assert "engine flags differ" in text and "maxNumSeqs 8" in text
    assert "KV cache sizes differ: A 9,360; B 12,000" in text
    assert "time scale differ" in text and "0.2" in text
    assert "different requests: 3 of 3 runs" in text
    assert "model differ" not in text and "workers differ" not in text


def test_compare_warns_on_the_clock(tmp_path: Path) -> None:
    experiment = example("prefix-cache-service.yaml")
    a = _clean(tmp_path / "a", experiment)
    b = _clean(tmp_path / "b", experiment, clock="wall")
    assert any(w.startswith("time scale differ") for w in compare_warnings(a, b))


def test_compare_flags_another_popularity(tmp_path: Path) -> None:
    """Same prefix counts, same sizes: only the popularity differs, and skew alone moves the
    hit rate, so the sides' workloads are said to differ."""
    base = example("prefix-cache-service.yaml")
    workload = base.spec.workload.to_k8s()
    workload["sharedPrefix"]["popularity"] = {"zipf": {"s": 1.2}}
    skewed = example("prefix-cache-service.yaml", workload=workload)
    warnings = compare_warnings(_clean(tmp_path / "a", base), _clean(tmp_path / "b", skewed))
    [differ] = [w for w in warnings if w.startswith("workload differ")]
    assert "popularity uniform" in differ and "popularity zipf s=1.2" in differ


def test_goodput_in_the_report_and_in_compare(tmp_path: Path) -> None:
    judged = example("prefix-cache-service.yaml", slo={"ttft": "200ms", "tpot": "30ms"})
    records = [
        record(t - 1, P7, t, request_hit_rate=0.5, goodput=g, slo_attainment=a)
        for t, g, a in ((1, 2.0, 0.5), (2, 3.0, 0.75), (3, 4.0, 1.0))
    ]
    store = store_of(tmp_path / "a", judged, records)
    console = Console(record=True, width=300, file=io.StringIO())
    render_report(store, console, tmp_path)
    text = console.export_text()
    assert "Goodput, good req/s" in text and "3.00 | 75.0 %" in text  # medians of the trials
    assert "objectives: ttft 200ms, tpot 30ms" in text
    plain = _clean(tmp_path / "b", example("prefix-cache-service.yaml"))
    judged_side = side_of("A", store, None)
    compared = _text(compare_table(judged_side, plain))
    assert "goodput A" in compared and "3.00 (75.0 %)" in compared
    assert any(w.startswith("objectives differ") for w in compare_warnings(judged_side, plain))


def _replayed(tmp: Path, experiment, sha: str, rows: int = 200):
    trace = TraceInfo(
        source="small-mooncake.jsonl", sha256=sha * 64, rows=rows, input_tokens=1864,
        output_tokens=56, seconds=49.6,
    )  # fmt: skip
    point = Point(concurrency=32)
    records = [
        record(t - 1, point, t, request_hit_rate=0.5).model_copy(update={"trace": trace})
        for t in (1, 2, 3)
    ]
    return side_of(tmp.name, store_of(tmp, experiment, records), None)


def test_compare_flags_another_trace_under_the_same_file_name(tmp_path: Path) -> None:
    """Two replays of files with one name: only the records' sha256 tells them apart."""
    replay = example("trace-replay.yaml")
    a, b = _replayed(tmp_path / "a", replay, "a"), _replayed(tmp_path / "b", replay, "b")
    assert compare_warnings(a, _replayed(tmp_path / "c", replay, "a")) == []
    [differ] = [w for w in compare_warnings(a, b) if w.startswith("workload differ")]
    assert "small-mooncake.jsonl, 200 rows (sha256 aaaaaaaaaaaa...)" in differ
    assert "(sha256 bbbbbbbbbbbb...)" in differ and "timing trace at speedup 1" in differ
    closed = example("trace-replay.yaml", workload={"trace": {"file": "t", "timing": "closed"}})
    [differ] = [
        w
        for w in compare_warnings(a, _replayed(tmp_path / "d", closed, "a"))
        if w.startswith("workload differ")
    ]
    assert "timing closed (timestamps ignored)" in differ
