"""Two experiments, or two arms of one, side by side on the points they share, with the
trials a reader must not trust marked, and a warning for every condition the sides differ in
that changes the answer."""

from pydantic import BaseModel
from rich.table import Table

from kvbench.api import AggregatePoint, RunRecord
from kvbench.report.conditions import BALANCING, conditions
from kvbench.report.formats import milliseconds as _ms
from kvbench.report.formats import percent as _pct
from kvbench.report.trials import Trials, group_trials, legend, marks
from kvbench.runner import RunStore

__all__ = ["Side", "compare_table", "compare_warnings", "side_of"]


class Side(BaseModel):
    """One side of a comparison: an experiment's results, optionally one arm of them."""

    label: str
    points: list[AggregatePoint]
    records: list[RunRecord] = []
    conditions: dict[str, str] = {}

    def trials(self) -> dict[tuple[str, str, str], Trials]:
        return group_trials(self.records)


def side_of(label: str, store: RunStore, arm: str | None) -> Side:
    """One side from a store's aggregate and records, every arm or only `arm`."""
    points = store.aggregate()
    records = [r for r in store.records() if r.error is None]
    if arm:
        points = [p for p in points if p.arm == arm]
        records = [r for r in records if r.arm == arm]
        if not points:
            raise ValueError(f"{label}: no finished runs of arm {arm!r}")
    spec = store.experiment().spec
    return Side(label=label, points=points, records=records, conditions=conditions(spec, records))


def _key(p: AggregatePoint, with_arm: bool) -> tuple[str, ...]:
    return (p.arm, p.variant, p.point.key) if with_arm else (p.variant, p.point.key)


def _with_arm(a: Side, b: Side) -> bool:
    arms = {p.arm for p in a.points}
    return arms == {p.arm for p in b.points} and len(arms) > 1


def _balancing_caption(a: Side, b: Side) -> str | None:
    """How each side's Service arms balanced, when either recorded it."""
    found = [side.conditions.get(BALANCING) for side in (a, b)]
    if not any(found):
        return None
    return "Service balancing: " + "; ".join(
        f"{name} {value or 'not recorded'}" for name, value in zip("AB", found, strict=True)
    )


def _goodput(p: AggregatePoint) -> str:
    return "-" if p.goodput is None else f"{p.goodput:.2f} ({_pct(p.slo_attainment)})"


def compare_table(a: Side, b: Side) -> Table:
    """Hit rate, TTFT and throughput of A and B per shared point, with B's change over A."""
    with_arm = _with_arm(a, b)
    b_by_key = {_key(p, with_arm): p for p in b.points}
    ta, tb = a.trials(), b.trials()
    captions = [
        "hit: share of requests that hit | hit tokens / queried tokens (workers' counters)",
        _balancing_caption(a, b),
        legend([*ta.values(), *tb.values()]),
    ]
    table = Table(
        title=f"A = {a.label}   B = {b.label}",
        caption="\n".join(c for c in captions if c),
        caption_justify="left",
    )
    goodput = any(p.goodput is not None for p in (*a.points, *b.points))
    columns = ["point", "hit A", "hit B", "B - A", "TTFT p50 A", "TTFT p50 B", "TTFT p99 A"]
    columns += ["TTFT p99 B", "req/s A", "req/s B"]
    columns += ["goodput A", "goodput B"] if goodput else []
    for column in columns:
        table.add_column(column, justify="left" if column == "point" else "right")
    for pa in a.points:
        pb = b_by_key.get(_key(pa, with_arm))
        if pb is None:
            continue
        ma = marks(ta.get((pa.arm, pa.variant, pa.point.key)))
        mb = marks(tb.get((pb.arm, pb.variant, pb.point.key)))
        delta = (
            f"{100 * (pb.request_hit_rate - pa.request_hit_rate):+.1f} pt"
            if pa.request_hit_rate is not None and pb.request_hit_rate is not None
            else "-"
        )
        table.add_row(
            " / ".join(_key(pa, with_arm)),
            f"{_pct(pa.request_hit_rate)} | {_pct(pa.token_hit_rate)}{ma}",
            f"{_pct(pb.request_hit_rate)} | {_pct(pb.token_hit_rate)}{mb}",
            delta,
            _ms(pa.ttft_p50) + ma,
            _ms(pb.ttft_p50) + mb,
            _ms(pa.ttft_p99) + ma,
            _ms(pb.ttft_p99) + mb,
            f"{pa.requests_per_second or 0:.1f}{ma}",
            f"{pb.requests_per_second or 0:.1f}{mb}",
            *([_goodput(pa) + ma, _goodput(pb) + mb] if goodput else []),
        )
    return table


def _flagged_runs(side: Side) -> dict[str, int]:
    trials = side.trials().values()
    return {
        "client-bound": sum(t.client_bound for t in trials),
        "with failed requests": sum(t.errors for t in trials),
        "with restarted pods": sum(t.restarted for t in trials),
    }


def _digests(side: Side) -> dict[tuple[str, str, int], str | None]:
    return {(r.variant, r.point.key, r.trial): r.digest for r in side.records}


def compare_warnings(a: Side, b: Side) -> list[str]:
    """What stops a reader from taking B - A as the effect of what the sides were meant to
    differ in: conditions that differ, flagged runs, different requests."""
    warnings = []
    for name, value in a.conditions.items():
        other = b.conditions.get(name)
        if name != "requests digest" and other is not None and other != value:
            warnings.append(f"{name} differ: A {value}; B {other}")
    da, db = _digests(a), _digests(b)
    shared = [k for k in da if k in db]
    differing = [k for k in shared if da[k] != db[k]]
    if differing:
        warnings.append(
            f"different requests: {len(differing)} of {len(shared)} runs the sides share "
            "(variant, point, trial) sent a different request sequence (their digests differ)"
        )
    for side, name in ((a, "A"), (b, "B")):
        flagged = {k: n for k, n in _flagged_runs(side).items() if n}
        if flagged:
            what = ", ".join(f"{n} {k}" for k, n in flagged.items())
            warnings.append(f"{name} has runs a reader must not trust: {what}")
    return warnings
