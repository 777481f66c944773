"""Print the articles' published figures next to the simulator's, fitted apart from predicted.

Every figure of ``operator/kvbench/sim/figures.yaml`` runs in virtual time through the
engine core (``kvbench.sim.calibration``: no HTTP, exact and machine-independent). A
figure is fitted when its timing profile lists it in ``fitted_on``; every other one is a
prediction, held to the tolerance the table stated before the run:

    .venv/bin/python bench/sim_calibration.py
"""

from __future__ import annotations

import time

from kvbench.sim.calibration import simulate
from kvbench.sim.figures import Figure, load_figures


def _value(figure: Figure, value: float) -> str:
    return f"{value:,.0f}" if figure.unit in ("tokens", "count", "tok/s") else f"{value:.4g}"


def _tolerance(figure: Figure) -> str:
    return (
        f"±{_value(figure, figure.tolerance)}"
        if figure.absolute
        else f"±{figure.tolerance * 100:.3g}%"
    )


def _error(figure: Figure, value: float) -> str:
    error = figure.error(value)
    return f"{error:+.3g}" if figure.absolute or figure.published == 0 else f"{error:+.1%}"


def _table(title: str, figures: list[Figure], values: dict[str, float]) -> int:
    print(f"{title} ({len(figures)})")
    print(f"  {'figure':<38} {'unit':<6} {'published':>10} {'simulated':>10} {'error':>7} "
          f"{'tolerance':>9}  pass")  # fmt: skip
    failed = 0
    for f in figures:
        ok = f.passes(values[f.id])
        failed += not ok
        mark = "yes" if ok else ("no (known)" if f.known_off else "NO")
        print(f"  {f.id:<38} {f.unit:<6} {_value(f, f.published):>10} "
              f"{_value(f, values[f.id]):>10} {_error(f, values[f.id]):>7} "
              f"{_tolerance(f):>9}  {mark}")  # fmt: skip
    return failed


def main() -> None:
    started = time.perf_counter()
    values = simulate()
    figures = list(load_figures())
    fitted = [f for f in figures if f.fitted]
    predicted = [f for f in figures if not f.fitted]
    bad_fits = _table("fitted (the profile's numbers were chosen to match these)", fitted, values)
    print()
    bad = _table("predicted (tolerance stated before the run)", predicted, values)
    known = sum(1 for f in predicted if f.known_off and not f.passes(values[f.id]))
    print(f"\nfitted: {len(fitted) - bad_fits}/{len(fitted)} pass; predicted: "
          f"{len(predicted) - bad}/{len(predicted)} pass, {known} known off "
          "(docs/simulator.md, Calibration)")  # fmt: skip
    print(f"(ran in {time.perf_counter() - started:.1f} s of wall time)")


if __name__ == "__main__":
    main()
