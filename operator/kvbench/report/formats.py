"""How figures are written wherever they are shown (tables, comparisons, progress lines), so
that one figure reads the same everywhere."""

__all__ = ["milliseconds", "percent"]


def percent(value: float | None) -> str:
    """A share as `12.3 %`; `-` when unknown."""
    return "-" if value is None else f"{100 * value:.1f} %"


def milliseconds(value: float | None) -> str:
    """Seconds as whole milliseconds with thousands separators (`1,234`); `-` when unknown."""
    return "-" if value is None else f"{1000 * value:,.0f}"
