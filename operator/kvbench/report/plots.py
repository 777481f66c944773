"""PNG plots of an experiment's results (matplotlib, imported only when plotting).

Every series gets its own colour, line style and marker, so that more than ten series stay
apart in print and for colour-blind readers; legends sit outside the axes, never on the
curves; published figures, where a reference has them, are drawn as black crosses."""

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.api import AggregatePoint
from kvbench.report.references import Reference

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["hit_rate_figure", "plot_hit_rates", "plot_ttft", "series_styles", "ttft_figure"]

_COLOURS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
]  # fmt: skip
_LINES = ["-", "--", ":", "-."]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def series_styles(count: int) -> list[dict[str, str]]:
    """`count` distinct (colour, line style, marker) triples: colour varies fastest; line
    style and marker change on every pass through the colours, so no two series share all
    three before 10 x 4 x 8 of them."""
    styles = []
    for i in range(count):
        turn = i // len(_COLOURS)
        styles.append(
            {
                "color": _COLOURS[i % len(_COLOURS)],
                "linestyle": _LINES[turn % len(_LINES)],
                "marker": _MARKERS[(i + turn) % len(_MARKERS)],
            }
        )
    return styles


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path) -> Path:
    figure.savefig(path, dpi=120, bbox_inches="tight")
    _pyplot().close(figure)
    return path


def plot_hit_rates(
    points: list[AggregatePoint], path: Path, title: str, reference: Reference | None = None
) -> Path | None:
    """`hit_rate_figure` written to `path` as a PNG; None when there is nothing to plot."""
    figure = hit_rate_figure(points, title, reference)
    return None if figure is None else _save(figure, path)


def hit_rate_figure(
    points: list[AggregatePoint], title: str, reference: Reference | None = None
) -> "Figure | None":
    """Hit rate against distinct prefixes, one line per arm x variant x concurrency (the
    request hit rate; the token hit rate where the front end reports no cached tokens), the
    capacity model and the affinity bound, and the published points. None when the
    experiment has no prefix points."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    model: dict[int, float] = {}
    bound: dict[int, float] = {}
    for p in points:
        prefixes = p.point.prefixes
        if prefixes is None:
            continue
        rate, which = p.request_hit_rate, "requests"
        if rate is None:
            rate, which = p.token_hit_rate, "tokens"
        if rate is None:
            continue
        series[f"{p.arm} / {p.variant} / conc {p.point.concurrency} ({which})"].append(
            (prefixes, rate)
        )
        if p.predicted_hit_rate is not None:
            model[prefixes] = p.predicted_hit_rate
        if p.predicted_affinity_hit_rate is not None:
            bound[prefixes] = p.predicted_affinity_hit_rate
    if not series:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.8))
    colours = {}
    for (label, values), style in zip(series.items(), series_styles(len(series)), strict=True):
        values.sort()
        axes.plot([x for x, _ in values], [100 * y for _, y in values], label=label, **style)
        colours[label] = style["color"]
    if model:
        xs = sorted(model)
        axes.plot(xs, [100 * model[x] for x in xs], "k--", lw=2, label="model: service")
    if bound and any(bound[x] != model.get(x) for x in bound):
        xs = sorted(bound)
        axes.plot(
            xs, [100 * bound[x] for x in xs], color="0.5", ls=":", lw=2, label="model: affinity"
        )
    for conc, xs, ys in _published(reference, "request_hit_rate"):
        colour = next((c for label, c in colours.items() if f"conc {conc} " in label), "black")
        axes.scatter(
            xs, [100 * y for y in ys], color=colour, edgecolors="black", marker="X", s=90,
            zorder=5, label=f"published, conc {conc}",
        )  # fmt: skip
    axes.set_title(title, fontsize="medium")
    axes.set_xlabel("distinct prefixes P")
    axes.set_ylabel("hit rate (%)")
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    return figure


def _published(reference: Reference | None, field: str) -> list[tuple[int, list[int], list[float]]]:
    """(concurrency, prefixes, values) of a reference's published `field`, per concurrency."""
    if reference is None:
        return []
    by_conc: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for p in reference.points:
        value = getattr(p, field)
        if value is not None and p.prefixes is not None:
            by_conc[p.concurrency].append((p.prefixes, value))
    return [
        (conc, [x for x, _ in sorted(v)], [y for _, y in sorted(v)])
        for conc, v in sorted(by_conc.items())
    ]


def plot_ttft(
    samples: dict[tuple[int, str], list[float]],
    clock: str,
    path: Path,
    title: str,
    reference: Reference | None = None,
) -> Path | None:
    """`ttft_figure` written to `path` as a PNG; None without samples."""
    figure = ttft_figure(samples, clock, title, reference)
    return None if figure is None else _save(figure, path)


def ttft_figure(
    samples: dict[tuple[int, str], list[float]],
    clock: str,
    title: str,
    reference: Reference | None = None,
) -> "Figure | None":
    """Empirical CDFs of TTFT, one panel per concurrency, one curve per label in it (arm /
    variant / prefixes); published medians and p99s as crosses at 0.5 and 0.99. `samples`
    is keyed by (concurrency, label). None without samples."""
    samples = {k: sorted(v) for k, v in samples.items() if v}
    if not samples:
        return None
    concurrencies = sorted({c for c, _ in samples})
    plt = _pyplot()
    figure, panels = plt.subplots(
        len(concurrencies), 1, figsize=(8, 2.6 * len(concurrencies) + 0.6), sharex=True,
        squeeze=False,
    )  # fmt: skip
    for conc, (axes,) in zip(concurrencies, panels, strict=True):
        labels = [label for c, label in samples if c == conc]
        colours = {}
        for label, style in zip(labels, series_styles(len(labels)), strict=True):
            values = samples[(conc, label)]
            n = len(values)
            axes.step(
                [1000 * v for v in values], [(i + 1) / n for i in range(n)], where="post",
                label=label, color=style["color"], linestyle=style["linestyle"],
            )  # fmt: skip
            colours[label] = style["color"]
        _published_ttft(axes, reference, conc, colours)
        axes.set_xscale("log")
        axes.set_ylabel(f"share, conc {conc}")
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3, which="both")
        axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1))
    panels[0][0].set_title(title, fontsize="medium")
    panels[-1][0].set_xlabel(f"TTFT ({clock} ms, log scale)")
    return figure


def _published_ttft(axes, reference: Reference | None, conc: int, colours: dict[str, str]) -> None:
    """Published p50 and p99 of the panel's concurrency, each in the colour of the measured
    curve of its point (black where none matches)."""
    if reference is None:
        return
    for p in (p for p in reference.points if p.concurrency == conc):
        xs, ys = [], []
        for value, share in ((p.ttft_p50, 0.5), (p.ttft_p99, 0.99)):
            if value is not None:
                xs.append(1000 * value)
                ys.append(share)
        if not xs:
            continue
        parts = [*([p.variant] if p.variant else []), *([f"p{p.prefixes}"] if p.prefixes else [])]
        name = " / ".join(parts)
        colour = next((c for label, c in colours.items() if name and label.endswith(name)), "black")
        axes.scatter(
            xs, ys, color=colour, edgecolors="black", marker="X", s=70, zorder=5,
            label=f"published p50, p99 {name}".rstrip(),
        )  # fmt: skip
