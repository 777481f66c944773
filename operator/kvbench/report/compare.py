"""Two experiments, or two arms of one, side by side on the points they share."""

from pydantic import BaseModel
from rich.table import Table

from kvbench.api import AggregatePoint
from kvbench.report.formats import milliseconds as _ms
from kvbench.report.formats import percent as _pct
from kvbench.runner import RunStore

__all__ = ["Side", "compare_table", "side_of"]


class Side(BaseModel):
    """One side of a comparison: an experiment's results, optionally one arm of them."""

    label: str
    points: list[AggregatePoint]


def side_of(label: str, store: RunStore, arm: str | None) -> Side:
    """One side from a store's aggregate, every arm or only `arm`."""
    points = store.aggregate()
    if arm:
        points = [p for p in points if p.arm == arm]
        if not points:
            raise ValueError(f"{label}: no finished runs of arm {arm!r}")
    return Side(label=label, points=points)


def _key(p: AggregatePoint, with_arm: bool) -> tuple[str, ...]:
    return (p.arm, p.variant, p.point.key) if with_arm else (p.variant, p.point.key)


def compare_table(a: Side, b: Side) -> Table:
    """Hit rate, TTFT and throughput of A and B per shared point, with B's change over A."""
    with_arm = {p.arm for p in a.points} == {p.arm for p in b.points} and len(
        {p.arm for p in a.points}
    ) > 1
    b_by_key = {_key(p, with_arm): p for p in b.points}
    table = Table(title=f"A = {a.label}   B = {b.label}")
    for column in (
        "point",
        "hit A",
        "hit B",
        "B - A",
        "TTFT p50 A",
        "TTFT p50 B",
        "TTFT p99 A",
        "TTFT p99 B",
        "req/s A",
        "req/s B",
    ):
        table.add_column(column, justify="left" if column == "point" else "right")
    for pa in a.points:
        pb = b_by_key.get(_key(pa, with_arm))
        if pb is None:
            continue
        delta = (
            f"{100 * (pb.request_hit_rate - pa.request_hit_rate):+.1f} pt"
            if pa.request_hit_rate is not None and pb.request_hit_rate is not None
            else "-"
        )
        table.add_row(
            " / ".join(_key(pa, with_arm)),
            _pct(pa.request_hit_rate),
            _pct(pb.request_hit_rate),
            delta,
            _ms(pa.ttft_p50),
            _ms(pb.ttft_p50),
            _ms(pa.ttft_p99),
            _ms(pb.ttft_p99),
            f"{pa.requests_per_second or 0:.1f}",
            f"{pb.requests_per_second or 0:.1f}",
        )
    return table
