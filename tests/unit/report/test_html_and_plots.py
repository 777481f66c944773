"""The HTML report is one self-contained file holding the tables and every plot; plots keep
more than ten series apart and carry a title and the published points."""

import base64
import html
import io
import re
from pathlib import Path

from report_builders import example, record, store_of
from rich.console import Console

from kvbench.api import Point
from kvbench.cli.report import write_report
from kvbench.report.plots import plot_hit_rates, series_styles
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
    experiment = example("prefix-cache-service.yaml")
    records = [
        record(i, Point(prefixes=p, concurrency=c), 1, arm="service", variant=f"v{v}",
               request_hit_rate=min(1.0, 4 / p) - 0.01 * v)
        for i, (v, c, p) in enumerate(
            (v, c, p) for v in range(4) for c in (4, 8, 16) for p in (2, 7, 12, 24)
        )
    ]  # fmt: skip
    reference = Reference(
        id="r", source="s", conditions={"model": "m"},
        points=[PublishedPoint(prefixes=7, concurrency=8, request_hit_rate=0.555)],
    )  # fmt: skip
    path = plot_hit_rates(
        aggregate(experiment.spec, records), tmp_path / "many.png", "title", reference
    )
    assert path is not None and path.read_bytes().startswith(_PNG)
