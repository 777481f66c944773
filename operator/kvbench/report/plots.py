"""PNG plots of an experiment's results (matplotlib, imported only when plotting)."""

from collections import defaultdict
from pathlib import Path

from kvbench.api import AggregatePoint

__all__ = ["plot_hit_rates", "plot_ttft"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_hit_rates(points: list[AggregatePoint], path: Path) -> Path | None:
    """Request hit rate against distinct prefixes, one line per arm x variant x concurrency,
    with the capacity model dashed. None when the experiment has no prefix points."""
    series: dict[str, list[AggregatePoint]] = defaultdict(list)
    model: dict[int, float] = {}
    for p in points:
        if p.point.prefixes is None or p.request_hit_rate is None:
            continue
        series[f"{p.arm} / {p.variant} / conc {p.point.concurrency}"].append(p)
        if p.predicted_hit_rate is not None:
            model[p.point.prefixes] = p.predicted_hit_rate
    if not series:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, values in series.items():
        values.sort(key=lambda p: p.point.prefixes or 0)
        axes.plot(
            [p.point.prefixes for p in values],
            [100 * (p.request_hit_rate or 0) for p in values],
            marker="o",
            label=label,
        )
    if model:
        xs = sorted(model)
        axes.plot(xs, [100 * model[x] for x in xs], "k--", label="model min(1, held/P)")
    axes.set_xlabel("distinct prefixes")
    axes.set_ylabel("request hit rate (%)")
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_ttft(samples: dict[str, list[float]], clock: str, path: Path) -> Path | None:
    """Empirical CDFs of TTFT, one per label (e.g. arm / point). None without samples."""
    samples = {k: sorted(v) for k, v in samples.items() if v}
    if not samples:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, values in samples.items():
        n = len(values)
        axes.step(
            [1000 * v for v in values], [(i + 1) / n for i in range(n)], where="post", label=label
        )
    axes.set_xscale("log")
    axes.set_xlabel(f"TTFT ({clock} ms, log scale)")
    axes.set_ylabel("share of requests")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
