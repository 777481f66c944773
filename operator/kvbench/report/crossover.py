"""Where KV-aware routing stops paying: a sweep's points (workers x KV size x prefixes, the
Service and prefix affinity at each), the gain of affinity over the Service, and the
crossovers where that gain falls below a threshold, as a table and a plot.

Prefix affinity is the bound KV-aware routing can reach (each prefix always on the pod that
holds it), so where affinity gains little, no KV-aware router will gain more. It gains little
at both ends of the prefix axis: with few prefixes every worker holds them all and the Service
hits as well (`all-fit`); with many, even one worker's share of the prefixes does not fit its
KV cache and nothing hits under either arm (`no-fit`). In between it pays (`pays`).
"""

from collections import defaultdict
from math import exp, log
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from kvbench.api import AggregatePoint
from kvbench.report.formats import milliseconds, percent

__all__ = [
    "DEFAULT_THRESHOLD",
    "Curve",
    "Regime",
    "SweepPoint",
    "crossover_figure",
    "crossover_lines",
    "crossover_table",
    "find_curves",
    "plot_crossover",
    "sweep_points",
]

DEFAULT_THRESHOLD = 0.05
"""Five points of request hit rate: below it, the gain is within the spread of one trial's
hit rate and would not repay running a KV-aware router."""
HELD_LEVEL = 0.5
"""A below-threshold point with no paying neighbour to place it is `all-fit` when the better
arm still hits at least this share (the cache holds the prefixes), else `no-fit`."""

_EPS = 1e-9
"""Hit rates are shares of whole requests, so a gain of exactly the threshold comes out of
the subtraction a rounding error short of it: it still pays."""

Regime = Literal["pays", "all-fit", "no-fit", "unknown"]


class SweepPoint(BaseModel):
    """One workers x KV x prefixes cell: both arms' medians over trials, and the model's."""

    model_config = ConfigDict(frozen=True)

    workers: int
    kv_tokens: int
    prefixes: int
    service_hit_rate: float | None = None
    affinity_hit_rate: float | None = None
    service_ttft_p50: float | None = Field(None, description="seconds (simulated)")
    affinity_ttft_p50: float | None = Field(None, description="seconds (simulated)")
    predicted_service: float | None = None
    predicted_affinity: float | None = None

    @property
    def gain(self) -> float | None:
        """Request hit rate of affinity minus the Service's (a share: 0.05 is 5 points)."""
        if self.service_hit_rate is None or self.affinity_hit_rate is None:
            return None
        return self.affinity_hit_rate - self.service_hit_rate

    @property
    def ttft_gain(self) -> float | None:
        """Seconds of TTFT p50 affinity saves over the Service (negative: it costs)."""
        if self.service_ttft_p50 is None or self.affinity_ttft_p50 is None:
            return None
        return self.service_ttft_p50 - self.affinity_ttft_p50

    @property
    def predicted_gain(self) -> float | None:
        if self.predicted_service is None or self.predicted_affinity is None:
            return None
        return self.predicted_affinity - self.predicted_service


def sweep_points(
    workers: int,
    points: list[AggregatePoint],
    arms: dict[str, str],
    kv_tokens: dict[str, int],
) -> list[SweepPoint]:
    """One experiment's aggregate folded into cells: `arms` maps arm names to `service` or
    `affinity`, `kv_tokens` variant names to KV sizes; other arms and variants are skipped."""
    cells: dict[tuple[int, int], dict[str, object]] = defaultdict(dict)
    for p in points:
        arm, kv, prefixes = arms.get(p.arm), kv_tokens.get(p.variant), p.point.prefixes
        if arm is None or kv is None or prefixes is None:
            continue
        cell = cells[(kv, prefixes)]
        cell[f"{arm}_hit_rate"] = p.request_hit_rate
        cell[f"{arm}_ttft_p50"] = p.ttft_p50
        cell["predicted_service"] = p.predicted_hit_rate
        cell["predicted_affinity"] = p.predicted_affinity_hit_rate
    return [
        SweepPoint(workers=workers, kv_tokens=kv, prefixes=prefixes, **cell)  # type: ignore[arg-type]
        for (kv, prefixes), cell in sorted(cells.items())
    ]


class Curve(BaseModel):
    """One workers x KV combination's gain against prefixes, each point's regime, and the
    prefix counts (log-interpolated) where the gain crosses the threshold."""

    model_config = ConfigDict(frozen=True)

    workers: int
    kv_tokens: int
    points: list[SweepPoint]
    regimes: list[Regime]
    rises_at: float | None = Field(
        None, description="Prefixes where the gain climbs through the threshold (all-fit ends)"
    )
    falls_at: float | None = Field(
        None, description="Prefixes where the gain drops through the threshold (no-fit starts)"
    )

    @property
    def label(self) -> str:
        return f"{self.workers} workers, {self.kv_tokens:,} KV tokens"


def _crossing(p0: SweepPoint, p1: SweepPoint, threshold: float) -> float:
    """Where the gain meets the threshold between two points, linear in log(prefixes) (the
    plot's axis): a share of capacity per prefix is what matters, not the count."""
    g0, g1 = p0.gain, p1.gain
    assert g0 is not None and g1 is not None and g0 != g1
    share = (threshold - g0) / (g1 - g0)
    return exp(log(p0.prefixes) + share * (log(p1.prefixes) - log(p0.prefixes)))


def _by_level(point: SweepPoint) -> Regime:
    best = max(point.service_hit_rate or 0.0, point.affinity_hit_rate or 0.0)
    return "all-fit" if best >= HELD_LEVEL else "no-fit"


def _curve(workers: int, kv: int, points: list[SweepPoint], threshold: float) -> Curve:
    points = sorted(points, key=lambda p: p.prefixes)
    paying = [i for i, p in enumerate(points) if p.gain is not None and p.gain >= threshold - _EPS]
    regimes: list[Regime] = []
    for i, p in enumerate(points):
        if p.gain is None:
            regimes.append("unknown")
        elif i in paying:
            regimes.append("pays")
        elif paying and i < paying[0]:
            regimes.append("all-fit")
        elif paying and i > paying[-1]:
            regimes.append("no-fit")
        else:
            regimes.append(_by_level(p))
    rises = falls = None
    if paying and paying[0] > 0 and points[paying[0] - 1].gain is not None:
        rises = _crossing(points[paying[0] - 1], points[paying[0]], threshold)
    if paying and paying[-1] < len(points) - 1 and points[paying[-1] + 1].gain is not None:
        falls = _crossing(points[paying[-1]], points[paying[-1] + 1], threshold)
    return Curve(
        workers=workers,
        kv_tokens=kv,
        points=points,
        regimes=regimes,
        rises_at=rises,
        falls_at=falls,
    )


def find_curves(points: list[SweepPoint], threshold: float = DEFAULT_THRESHOLD) -> list[Curve]:
    """A curve per workers x KV combination, ordered by workers then KV size.

    A point pays when affinity gains at least `threshold` over the Service. A point below it
    is `all-fit` before the curve's first paying point and `no-fit` after its last; on a curve
    that never pays (or in a dip between paying points) the hit rate decides: the better arm
    hitting at least `HELD_LEVEL` means the prefixes fit, else they do not."""
    groups: dict[tuple[int, int], list[SweepPoint]] = defaultdict(list)
    for p in points:
        groups[(p.workers, p.kv_tokens)].append(p)
    return [_curve(w, kv, group, threshold) for (w, kv), group in sorted(groups.items())]


def _points_signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _ms_signed(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:+,.0f}"


_REGIME_STYLE = {"pays": "green", "all-fit": "yellow", "no-fit": "red", "unknown": "dim"}


def crossover_table(curves: list[Curve], threshold: float) -> Table:
    """Every cell: both arms' request hit rates and TTFT p50, affinity's gain in each, the
    model's gain beside the measured one, and the regime."""
    table = Table(
        title=f"Prefix affinity vs Service: request hit rate and TTFT p50 (simulated ms); "
        f"pays = gain >= {100 * threshold:g} points"
    )
    for name in ("workers", "KV tokens", "prefixes"):
        table.add_column(name, justify="right")
    for name in ("service hit", "affinity hit", "gain (pts)", "model gain", "service TTFT"):
        table.add_column(name, justify="right")
    for name in ("affinity TTFT", "TTFT saved"):
        table.add_column(name, justify="right")
    table.add_column("regime")
    for curve in curves:
        for i, (p, regime) in enumerate(zip(curve.points, curve.regimes, strict=True)):
            table.add_row(
                str(p.workers) if i == 0 else "",
                f"{p.kv_tokens:,}" if i == 0 else "",
                str(p.prefixes),
                percent(p.service_hit_rate),
                percent(p.affinity_hit_rate),
                _points_signed(p.gain),
                _points_signed(p.predicted_gain),
                milliseconds(p.service_ttft_p50),
                milliseconds(p.affinity_ttft_p50),
                _ms_signed(p.ttft_gain),
                f"[{_REGIME_STYLE[regime]}]{regime}[/]",
                end_section=i == len(curve.points) - 1,
            )
    return table


def crossover_lines(curves: list[Curve]) -> list[str]:
    """One sentence per curve: over which prefix counts affinity pays."""
    lines = []
    for c in curves:
        paying = [p.prefixes for p, r in zip(c.points, c.regimes, strict=True) if r == "pays"]
        if not paying:
            kinds = sorted(set(c.regimes))
            lines.append(f"{c.label}: affinity never pays here ({', '.join(kinds)})")
            continue
        start = f"from ~{c.rises_at:.1f}" if c.rises_at else f"from {paying[0]} (or fewer)"
        end = f"to ~{c.falls_at:.1f}" if c.falls_at else f"to {paying[-1]} (or more)"
        lines.append(f"{c.label}: affinity pays {start} {end} prefixes")
    return lines


def crossover_figure(curves: list[Curve], threshold: float, title: str):
    """One panel per worker count, a line per KV size: affinity's gain in request hit rate
    against prefixes (log axis), the band below the threshold shaded, points that do not pay
    drawn open and the crossovers marked. None when no point has a gain."""
    from kvbench.report.plots import _pyplot, series_styles

    curves = [c for c in curves if any(p.gain is not None for p in c.points)]
    if not curves:
        return None
    plt = _pyplot()
    workers = sorted({c.workers for c in curves})
    kv_sizes = sorted({c.kv_tokens for c in curves})
    styles = dict(zip(kv_sizes, series_styles(len(kv_sizes)), strict=True))
    columns = min(len(workers), 4)
    rows = -(-len(workers) // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False, sharey=True
    )
    gains = [100 * p.gain for c in curves for p in c.points if p.gain is not None]
    bottom = min(0.0, *gains) - 5
    top = max(100 * threshold, *gains) + 5
    for ax in axes.flat[len(workers) :]:
        ax.set_visible(False)
    for ax, count in zip(axes.flat, workers, strict=False):
        ax.axhline(100 * threshold, color="black", linewidth=0.8, linestyle="--")
        for c in (c for c in curves if c.workers == count):
            style = styles[c.kv_tokens]
            xs = [p.prefixes for p in c.points if p.gain is not None]
            ys = [100 * p.gain for p in c.points if p.gain is not None]
            ax.plot(xs, ys, label=f"{c.kv_tokens:,} KV tokens", **style)
            for x in (c.rises_at, c.falls_at):
                if x is not None:
                    ax.plot([x], [100 * threshold], marker="|", markersize=14, color="black")
                    ax.annotate(
                        f"{x:.0f}",
                        (x, 100 * threshold),
                        textcoords="offset points",
                        xytext=(0, -14),
                        ha="center",
                        fontsize=7,
                        color=style["color"],
                    )
            for p, regime in zip(c.points, c.regimes, strict=True):
                if p.gain is not None and regime != "pays":
                    ax.plot(
                        [p.prefixes],
                        [100 * p.gain],
                        marker=style["marker"],
                        color=style["color"],
                        markerfacecolor="white",
                    )
        ax.set_xscale("log")
        ax.axhspan(bottom, 100 * threshold, color="grey", alpha=0.12, linewidth=0)
        ax.set_ylim(bottom, top)
        ticks = sorted({p.prefixes for c in curves for p in c.points})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{count} workers", fontsize=10)
        ax.set_xlabel("distinct prefixes")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("affinity gain (points of hit rate)")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4)
    figure.suptitle(
        f"{title}: where prefix affinity stops paying (grey: gain below {100 * threshold:g} "
        "points, open markers; ticks: crossovers)",
        fontsize=10,
    )
    figure.tight_layout()
    return figure


def plot_crossover(curves: list[Curve], threshold: float, path: Path, title: str) -> Path | None:
    """`crossover_figure` written to `path` as a PNG; None when there is nothing to plot."""
    from kvbench.report.plots import _save

    figure = crossover_figure(curves, threshold, title)
    return None if figure is None else _save(figure, path)
