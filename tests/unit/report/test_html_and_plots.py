"""The HTML report is one self-contained file holding the tables and every plot; plots keep
more than ten series apart and carry a title and the published points."""

import base64
import html
import io
import re
from pathlib import Path

import pytest
from matplotlib.colors import to_hex
from report_builders import example, record, store_of
from rich.console import Console

from kvbench.api import Point
from kvbench.cli.report import write_report
from kvbench.report.plots import hit_rate_figure, plot_hit_rates, series_styles, ttft_figure
from kvbench.report.references import PublishedPoint, Reference
from kvbench.runner import aggregate

_PNG = b"\x89PNG\r\n\x1a\n"


def test_html_is_self_contained_and_holds_the_tables_and_plots(tmp_path: Path) -> None:
    records = [
        record(i, Point(prefixes=p, concurrency=8), t, request_hit_rate=h)
        for i, (p, h, t) in enumerate((p, h, t) for p, h in ((7, 0.55), (12, 0.33)) for t in (1, 2))
    ]
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), records)
    console = Console(record=True, width=200, file=io.StringIO())
    write_report(store, console, tmp_path, "article-002-6-workers")
    page = (tmp_path / "report.html").read_text()
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))
    text = (tmp_path / "report.txt").read_text()
    for words in ("Hit rate, requests | tokens", "Against the published measurement", "55.0 %"):
        assert words in text and words in shown, words
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<link" not in page.lower() and "<script" not in page.lower()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 1, "hit_rate.png; no TTFT plot without raw results"
    assert base64.b64decode(images[0]) == (tmp_path / "hit_rate.png").read_bytes()
    assert base64.b64decode(images[0]).startswith(_PNG)


def test_series_stay_distinct_past_ten() -> None:
    styles = series_styles(40)
    triples = {(s["color"], s["linestyle"], s["marker"]) for s in styles}
    assert len(triples) == 40
    pairs = {(s["color"], s["linestyle"]) for s in styles[:40]}
    assert len(pairs) == 40, "colour and line style alone tell 40 series apart"


def test_hit_rate_plot_with_many_series_and_published_points(tmp_path: Path) -> None:
    """Twelve measured series (4 variants x 3 concurrencies) each in its own colour and line
    style, sorted along P; the published point drawn where it was published, in the colour
    of its concurrency's series; the legend right of the axes, not on the curves."""
    experiment = example("prefix-cache-service.yaml")
    records = [
        record(i, Point(prefixes=p, concurrency=c), 1, arm="service", variant=f"v{v}",
               request_hit_rate=min(1.0, 4 / p) - 0.01 * v)
        for i, (v, c, p) in enumerate(
            (v, c, p) for v in range(4) for c in (4, 8, 16) for p in (24, 2, 12, 7)
        )
    ]  # fmt: skip
    reference = Reference(
        id="r", source="s", conditions={"model": "m"},
        points=[PublishedPoint(prefixes=7, concurrency=8, request_hit_rate=0.555)],
    )  # fmt: skip
    figure = hit_rate_figure(aggregate(experiment.spec, records), "the title", reference)
    assert figure is not None
    (axes,) = figure.axes
    assert axes.get_title() == "the title"
    measured = {
        line.get_label(): line
        for line in axes.get_lines()
        if line.get_label().startswith("service")
    }
    assert set(measured) == {
        f"service / v{v} / conc {c} (requests)" for v in range(4) for c in (4, 8, 16)
    }
    for label, line in measured.items():
        v = int(label.split(" / v")[1][0])
        assert list(line.get_xdata()) == [2, 7, 12, 24], label
        assert list(line.get_ydata()) == [
            pytest.approx(100 * (min(1.0, 4 / p) - 0.01 * v)) for p in (2, 7, 12, 24)
        ]
    assert len({(m.get_color(), m.get_linestyle()) for m in measured.values()}) == 12
    (published,) = [c for c in axes.collections if c.get_label() == "published, conc 8"]
    assert published.get_offsets().tolist() == [[7, pytest.approx(55.5)]]
    conc_8 = {m.get_color() for label, m in measured.items() if "conc 8 " in label}
    assert to_hex(published.get_facecolor()[0]) in conc_8
    figure.canvas.draw()
    legend = axes.get_legend().get_window_extent()
    assert legend.x0 > axes.get_window_extent().x1, "the legend sits right of the axes"
    assert (
        plot_hit_rates(aggregate(experiment.spec, records), tmp_path / "many.png", "t", reference)
        .read_bytes()
        .startswith(_PNG)
    )


def test_ttft_plot_has_a_panel_per_concurrency_with_published_p50_and_p99() -> None:
    samples = {(4, "service / v0 / p7"): [0.02, 0.01, 0.03], (8, "service / v0 / p7"): [0.05]}
    reference = Reference(
        id="r", source="s", conditions={"model": "m"},
        points=[PublishedPoint(prefixes=7, concurrency=8, ttft_p50=0.04, ttft_p99=0.09)],
    )  # fmt: skip
    figure = ttft_figure(samples, "wall", "t", reference)
    assert figure is not None
    first, second = figure.axes
    assert first.get_ylabel() == "share, conc 4" and second.get_ylabel() == "share, conc 8"
    (curve,) = first.get_lines()
    assert list(curve.get_xdata()) == [10, 20, 30]
    assert list(curve.get_ydata()) == pytest.approx([1 / 3, 2 / 3, 1])
    assert not first.collections, "no published figure at concurrency 4"
    (published,) = second.collections
    assert published.get_offsets().tolist() == [[40, 0.5], [90, 0.99]]
    assert to_hex(published.get_facecolor()[0]) == second.get_lines()[0].get_color()
    assert ttft_figure({(4, "x"): []}, "wall", "t") is None
