"""Published figures beside the measured ones, for both source articles; the references ship
with the examples and every annotated example names one that fits its plan."""

import io
from pathlib import Path
from statistics import median

import pytest
import yaml
from click.testing import CliRunner
from report_builders import EXAMPLES, example, published, record, store_of
from rich.console import Console

from kvbench.api import Point, parse_experiment
from kvbench.cli.report import report
from kvbench.report import render_report
from kvbench.report.references import (
    REPRODUCES,
    ReferenceError,
    default_reference_dirs,
    find_reference,
    load_reference,
)


def _reference(name: str):
    return load_reference(find_reference(name, default_reference_dirs()))


def _report(store, reference=None) -> str:
    console = Console(record=True, width=240, file=io.StringIO())
    render_report(store, console, store.root, reference)
    return console.export_text()


def _row(text: str, *parts: str) -> str:
    """The one line of `text` that holds every part."""
    lines = [line for line in text.splitlines() if all(p in line for p in parts)]
    assert len(lines) == 1, f"{parts}: {len(lines)} lines"
    return lines[0]


def _figure(reference: dict, field: str, **point) -> float:
    matches = [p for p in reference["points"] if all(p.get(k) == v for k, v in point.items())]
    assert len(matches) == 1
    return matches[0][field]


def test_article_002_six_workers_hit_rates_ttft_and_throughput(tmp_path: Path) -> None:
    hits = [0.50, 0.61, 0.52]
    rates = [13.0, 15.0, 14.0]
    records = [
        record(t - 1, Point(prefixes=7, concurrency=8), t, request_hit_rate=h)
        for t, h in enumerate(hits, start=1)
    ] + [
        record(2 + t, Point(prefixes=24, concurrency=16), t, request_hit_rate=0.15,
               requests_per_second=r, ttft_p50=0.2)
        for t, r in enumerate(rates, start=1)
    ]  # fmt: skip
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), records)
    text = _report(store, _reference("article-002-6-workers"))
    ref = published("article-002-6-workers")

    pub = _figure(ref, "requestHitRate", prefixes=7, concurrency=8)
    line = _row(text, "p7-c8", "request hit rate")
    assert f"{100 * pub:.1f} %" in line
    assert f"{100 * median(hits):.1f} %" in line
    assert f"{100 * (median(hits) - pub):+.1f} pt" in line

    pub = _figure(ref, "requestsPerSecond", prefixes=24, concurrency=16)
    line = _row(text, "p24-c16", "req/s")
    delta = median(rates) - pub
    assert f"{pub:.1f}" in line and f"{median(rates):.1f}" in line
    assert f"{delta:+.1f} ({100 * delta / pub:+.0f} %)" in line

    assert "not measured" in _row(text, "p12-c4", "request hit rate"), "no run of p12-c4"
    assert "Reproduces article-002-6-workers" in text
    assert "Not the published conditions" not in text


def test_article_002_three_workers_and_a_mismatched_reference(tmp_path: Path) -> None:
    hits = [0.99, 0.96, 0.97]
    p99s = [2.5, 3.4, 2.9]
    records = [
        record(t - 1, Point(prefixes=2, concurrency=8), t, request_hit_rate=h)
        for t, h in enumerate(hits, start=1)
    ] + [
        record(2 + t, Point(prefixes=24, concurrency=16), t, request_hit_rate=0.17, ttft_p99=p)
        for t, p in enumerate(p99s, start=1)
    ]
    store = store_of(tmp_path, example("prefix-cache-service-3-workers.yaml"), records)
    text = _report(store, _reference("article-002-3-workers"))
    ref = published("article-002-3-workers")

    pub = _figure(ref, "requestHitRate", prefixes=2, concurrency=8)
    line = _row(text, "p2-c8", "request hit rate")
    assert f"{100 * pub:.1f} %" in line
    assert f"{100 * (median(hits) - pub):+.1f} pt" in line

    pub = _figure(ref, "ttftP99", prefixes=24, concurrency=16)
    delta = median(p99s) - pub
    line = _row(text, "p24-c16", "TTFT p99")
    assert f"{1000 * pub:,.0f}" in line and f"{1000 * median(p99s):,.0f}" in line
    assert f"{1000 * delta:,.0f} ({100 * delta / pub:+.0f} %)" in line

    other = _report(store, _reference("article-002-6-workers"))
    assert "Not the published conditions" in other
    assert "6 workers; this one 3" in other


def test_article_000_throughput_ttft_and_preemptions(tmp_path: Path) -> None:
    tok = [900.0, 800.0, 820.0]
    ttft = [0.6, 0.8, 0.7]
    preempted = [0, 2, 1]
    records = [
        record(t - 1, Point(concurrency=32), t, pods=1, kv_tokens=22048, preemptions=n,
               output_tokens_per_second=o, ttft_p50=f, latency_clock="wall")
        for t, (o, f, n) in enumerate(zip(tok, ttft, preempted, strict=True), start=1)
    ]  # fmt: skip
    store = store_of(tmp_path, example("concurrency-sweep.yaml"), records)
    text = _report(store, _reference("article-000-concurrency-sweep"))
    ref = published("article-000-concurrency-sweep")

    pub = _figure(ref, "outputTokensPerSecond", concurrency=32)
    delta = median(tok) - pub
    line = _row(text, "c32", "output tok/s")
    assert f"{pub:,.0f}" in line and f"{median(tok):,.0f}" in line
    assert f"{delta:+,.0f} ({100 * delta / pub:+.0f} %)" in line

    pub = _figure(ref, "ttftP50", concurrency=32)
    delta = median(ttft) - pub
    line = _row(text, "c32", "TTFT p50")
    assert f"+{1000 * delta:,.0f} ({100 * delta / pub:+.0f} %)" in line

    pub = _figure(ref, "preemptions", concurrency=32)
    assert pub == 0
    line = _row(text, "c32", "preemptions")
    assert line.rstrip(" │").endswith(f"{median(preempted):+d}"), "no relative change from 0"
    assert "not measured" in _row(text, "c64", "output tok/s")


def test_article_000_preemptions_of_long_inputs(tmp_path: Path) -> None:
    preempted = [5, 9, 8]
    records = [
        record(t - 1, Point(concurrency=32), t, pods=1, preemptions=n, ttft_p50=12.0)
        for t, n in enumerate(preempted, start=1)
    ]
    store = store_of(tmp_path, example("long-inputs.yaml"), records)
    text = _report(store, _reference("article-000-long-inputs"))
    pub = _figure(published("article-000-long-inputs"), "preemptions", concurrency=32)
    delta = median(preempted) - pub
    assert f"{delta:+d} ({100 * delta / pub:+.0f} %)" in _row(text, "c32", "preemptions")


def test_variant_figures_match_their_variant_only(tmp_path: Path) -> None:
    records = [
        record(0, Point(concurrency=1), 1, variant="graphs", output_tokens_per_second=160.0),
        record(1, Point(concurrency=1), 1, variant="eager", output_tokens_per_second=110.0),
    ]
    experiment = example("eager-vs-graphs.yaml", load={"concurrency": [1], "trials": 1})
    store = store_of(tmp_path, experiment, records)
    text = _report(store, _reference("article-000-eager-vs-graphs"))
    ref = published("article-000-eager-vs-graphs")
    for variant, measured in (("graphs", 160), ("eager", 110)):
        pub = _figure(ref, "outputTokensPerSecond", variant=variant, concurrency=1)
        line = _row(text, f"/ {variant} ", "c1 ", "output tok/s")
        assert f"{measured - pub:+,.0f}" in line


def _annotated() -> list[Path]:
    return [
        path
        for path in sorted(EXAMPLES.glob("*.yaml"))
        if REPRODUCES in (yaml.safe_load(path.read_text())["metadata"].get("annotations") or {})
    ]


def test_every_reference_is_named_by_an_example() -> None:
    named = {
        yaml.safe_load(p.read_text())["metadata"]["annotations"][REPRODUCES] for p in _annotated()
    }
    assert named == {p.stem for p in (EXAMPLES / "references").glob("*.yaml")}


@pytest.mark.parametrize("path", _annotated(), ids=lambda p: p.name)
def test_every_annotated_example_names_a_reference_that_fits_its_plan(path: Path) -> None:
    experiment = parse_experiment(yaml.safe_load(path.read_text()))
    name = experiment.metadata.annotations[REPRODUCES]
    reference = load_reference(find_reference(name, [EXAMPLES / "references"]))
    assert reference.id == name
    spec = experiment.spec
    shared = spec.workload.shared_prefix
    for point in reference.points:
        assert point.concurrency in spec.load.concurrency, point
        assert point.prefixes in (shared.prefixes if shared else [None]), point
        assert point.variant in (None, *spec.variant_names()), point
        assert point.arm in (None, *(a.name for a in spec.routing)), point


def test_article_002_examples_name_both_layouts() -> None:
    names = {
        parse_experiment(yaml.safe_load((EXAMPLES / f).read_text())).metadata.annotations.get(
            REPRODUCES
        )
        for f in ("prefix-cache-service.yaml", "prefix-cache-service-3-workers.yaml")
    }
    assert names == {"article-002-6-workers", "article-002-3-workers"}


def test_an_unknown_reference_is_named_with_where_it_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ReferenceError, match=r"article-999.*" + str(tmp_path)):
        find_reference("article-999", [tmp_path])
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nsource: y\nconditions: {model: m}\npoints: [{concurrency: 0}]\n")
    with pytest.raises(ReferenceError, match=r"bad\.yaml"):
        load_reference(find_reference(str(bad), []))


def test_report_command_writes_the_reference_and_the_html(tmp_path: Path) -> None:
    records = [record(0, Point(prefixes=7, concurrency=8), 1, request_hit_rate=0.5)]
    store_of(tmp_path, example("prefix-cache-service.yaml"), records)
    result = CliRunner().invoke(report, [str(tmp_path), "--reference", "article-002-6-workers"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.txt").read_text()
    assert "Against the published measurement" in text
    assert "Against the published measurement" in (tmp_path / "report.html").read_text()

    result = CliRunner().invoke(report, [str(tmp_path), "--reference", "article-999"])
    assert result.exit_code == 0, result.output
    assert "No published figures" in result.output
    assert "Against the published measurement" not in (tmp_path / "report.txt").read_text()


def test_the_annotation_names_the_reference_when_the_store_keeps_it(tmp_path: Path) -> None:
    records = [record(0, Point(prefixes=7, concurrency=8), 1, request_hit_rate=0.5)]
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), records)
    annotated = example("prefix-cache-service.yaml")
    store.experiment = lambda: annotated  # a store that kept the experiment's metadata
    from kvbench.cli.report import write_report

    console = Console(record=True, width=200, file=io.StringIO())
    write_report(store, console, tmp_path)
    assert "Reproduces article-002-6-workers" in (tmp_path / "report.txt").read_text()


def test_the_engine_flags_that_change_the_answer_are_named_set_or_default() -> None:
    """What a reader needs to know what ran: every flag that changes the answer, unset ones as
    vLLM's default, so a report of the admission gate or async scheduling turned off says so."""
    from kvbench.api import EngineSpec
    from kvbench.report.conditions import engine_flags

    default = engine_flags(EngineSpec(model="m"))
    assert "full-prompt admission vLLM default (on)" in default
    assert "async scheduling vLLM default (on)" in default
    assert "maxNumSeqs vLLM default" in default
    off = engine_flags(
        EngineSpec(
            model="m", scheduler_reserve_full_isl=False, async_scheduling=False,
            max_num_seqs=16, kv_cache_memory_bytes=1 << 30, enforce_eager=True,
        )
    )  # fmt: skip
    for named in ("full-prompt admission off", "async scheduling off", "maxNumSeqs 16",
                  "KV cache 1,073,741,824 B", "enforceEager on"):  # fmt: skip
        assert named in off, (named, off)
