"""Crossover detection on made-up gains (`kvbench.report.crossover`): regimes, interpolated
crossings, the table, the sentences and the plot."""

from math import sqrt
from pathlib import Path

import pytest
from rich.console import Console

from kvbench.api import AggregatePoint, Point
from kvbench.report.crossover import (
    SweepPoint,
    crossover_lines,
    crossover_table,
    find_curves,
    plot_crossover,
    sweep_points,
)


def _curve_points(
    gains: dict[int, float], service: float = 0.3, workers: int = 4, kv: int = 9360
) -> list[SweepPoint]:
    return [
        SweepPoint(
            workers=workers,
            kv_tokens=kv,
            prefixes=p,
            service_hit_rate=service,
            affinity_hit_rate=service + g,
            service_ttft_p50=0.1,
            affinity_ttft_p50=0.06,
        )
        for p, g in gains.items()
    ]


def test_a_hump_pays_in_the_middle_and_crosses_on_both_sides() -> None:
    """Catches: both ends called the same regime (the planner must know whether more KV or
    more workers would help), and crossings not where the gain meets the threshold."""
    points = _curve_points({2: 0.01, 8: 0.09, 32: 0.20, 128: 0.03})
    [curve] = find_curves(points[::-1], threshold=0.05)  # order of the input does not matter
    assert [p.prefixes for p in curve.points] == [2, 8, 32, 128]
    assert curve.regimes == ["all-fit", "pays", "pays", "no-fit"]
    # halfway in gain between 2 and 8 is halfway in log(prefixes): sqrt(2 * 8) = 4
    assert curve.rises_at == pytest.approx(sqrt(2 * 8))
    # 0.20 -> 0.03 meets 0.05 at 15/17 of the way from 32 to 128 in log space
    assert curve.falls_at == pytest.approx(32 * 4 ** (15 / 17))


def test_threshold_is_inclusive_and_moves_the_crossover() -> None:
    """Catches: a strict comparison (a gain of exactly the threshold does pay) and a
    threshold option that is not passed down."""
    points = _curve_points({2: 0.05, 8: 0.20, 32: 0.10})
    assert find_curves(points, 0.05)[0].regimes == ["pays", "pays", "pays"]
    strict = find_curves(points, 0.15)[0]
    assert strict.regimes == ["all-fit", "pays", "no-fit"]
    assert strict.rises_at is not None and 2 < strict.rises_at < 8
    assert strict.falls_at is not None and 8 < strict.falls_at < 32


def test_a_curve_that_never_pays_is_named_by_its_hit_rates() -> None:
    """Catches: a curve with no paying point left without a regime, or large KV (everything
    cached by both arms) confused with small KV (nothing cached by either)."""
    held = _curve_points({2: 0.0, 8: 0.01}, service=0.95, kv=99999)
    lost = _curve_points({64: 0.0, 128: 0.01}, service=0.02, kv=4096)
    curves = {c.kv_tokens: c for c in find_curves(held + lost)}
    assert curves[99999].regimes == ["all-fit", "all-fit"]
    assert curves[4096].regimes == ["no-fit", "no-fit"]
    assert curves[4096].rises_at is None and curves[4096].falls_at is None
    lines = crossover_lines(list(curves.values()))
    assert any("never pays" in line and "no-fit" in line for line in lines)


def test_curves_are_per_workers_and_kv() -> None:
    """Catches: points of different worker counts or KV sizes merged into one curve."""
    points = _curve_points({2: 0.1}, workers=2) + _curve_points({2: 0.1}, workers=4)
    points += _curve_points({2: 0.1}, workers=2, kv=20480)
    assert [(c.workers, c.kv_tokens) for c in find_curves(points)] == [
        (2, 9360),
        (2, 20480),
        (4, 9360),
    ]


def test_missing_hit_rates_are_unknown_not_zero() -> None:
    """Catches: a failed arm's missing hit rate read as 0 % (a made-up gain or crossover)."""
    points = _curve_points({2: 0.1, 8: 0.1})
    points.append(SweepPoint(workers=4, kv_tokens=9360, prefixes=32, service_hit_rate=0.2))
    [curve] = find_curves(points)
    assert curve.regimes == ["pays", "pays", "unknown"]
    assert curve.falls_at is None


def test_aggregate_points_fold_into_cells_by_arm_and_variant() -> None:
    """Catches: the service and affinity hit rates swapped, or an arm the sweep did not ask
    for (or another variant) mixed into a cell."""

    def agg(arm: str, variant: str, hit: float, ttft: float) -> AggregatePoint:
        return AggregatePoint(
            arm=arm,
            variant=variant,
            point=Point(prefixes=8, concurrency=4),
            trials=1,
            request_hit_rate=hit,
            ttft_p50=ttft,
            predicted_hit_rate=0.3,
            predicted_affinity_hit_rate=0.9,
        )

    aggregate = [
        agg("svc", "kv9360", 0.25, 0.2),
        agg("aff", "kv9360", 0.75, 0.05),
        agg("router", "kv9360", 0.99, 0.01),
        agg("aff", "other", 0.0, 9.0),
    ]
    [cell] = sweep_points(6, aggregate, {"svc": "service", "aff": "affinity"}, {"kv9360": 9360})
    assert (cell.workers, cell.kv_tokens, cell.prefixes) == (6, 9360, 8)
    assert cell.gain == pytest.approx(0.5)
    assert cell.ttft_gain == pytest.approx(0.15)
    assert cell.predicted_gain == pytest.approx(0.6)


def test_table_and_plot(tmp_path: Path) -> None:
    """Catches: a table missing a cell's gain or regime, and a plot that is not written."""
    points = _curve_points({2: 0.01, 8: 0.09, 32: 0.2, 128: 0.03})
    points += _curve_points({2: 0.3, 8: 0.4}, workers=8)
    curves = find_curves(points)
    console = Console(record=True, width=200)
    console.print(crossover_table(curves, 0.05))
    text = console.export_text()
    assert "+9.0" in text and "no-fit" in text and "all-fit" in text and "+40" in text
    path = plot_crossover(curves, 0.05, tmp_path / "crossover.png", "test")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_crossover([], 0.05, tmp_path / "none.png", "test") is None
