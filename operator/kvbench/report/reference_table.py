"""The published figures beside the measured ones, with the difference: the answer to "how
close did this run come to the measurement it reproduces"."""

from collections.abc import Callable

from pydantic import BaseModel
from rich.table import Table

from kvbench.api import AggregatePoint, ExperimentSpec, RunRecord
from kvbench.report.formats import milliseconds as _ms
from kvbench.report.formats import percent as _pct
from kvbench.report.references import PublishedPoint, Reference
from kvbench.report.trials import GroupKey, Trials, legend, marks

__all__ = ["Comparison", "compared", "reference_table", "reference_warnings"]


class _Figure(BaseModel):
    """How one figure is named, read from a measured point and written."""

    name: str
    field: str
    kind: str  # rate (difference in points), time (ms) or count
    decimals: int = 0


_FIGURES = [
    _Figure(name="request hit rate", field="request_hit_rate", kind="rate"),
    _Figure(name="TTFT p50 (ms)", field="ttft_p50", kind="time"),
    _Figure(name="TTFT p99 (ms)", field="ttft_p99", kind="time"),
    _Figure(name="req/s", field="requests_per_second", kind="count", decimals=1),
    _Figure(name="output tok/s", field="output_tokens_per_second", kind="count"),
    _Figure(name="preemptions per run", field="preemptions", kind="count"),
    _Figure(name="longest ITL (ms)", field="itl_max", kind="time"),
    _Figure(name="KV cache tokens", field="kv_cache_tokens", kind="count"),
]


class Comparison(BaseModel):
    """One published figure and what this run measured of it (None: not measured)."""

    arm: str
    variant: str
    point: str
    figure: str
    kind: str
    decimals: int = 0
    published: float
    measured: float | None
    trials: Trials | None = None


def _matches(published: PublishedPoint, p: AggregatePoint) -> bool:
    return (
        published.concurrency == p.point.concurrency
        and published.prefixes == p.point.prefixes
        and published.variant in (None, p.variant)
        and published.arm in (None, p.arm)
    )


def _measured(p: AggregatePoint, trials: Trials | None, field: str) -> float | None:
    if field in ("preemptions", "itl_max"):
        return None if trials is None else getattr(trials, field)
    value = getattr(p, field)
    return None if value is None else float(value)


def _point_name(published: PublishedPoint) -> str:
    parts = [] if published.prefixes is None else [f"p{published.prefixes}"]
    return "-".join([*parts, f"c{published.concurrency}"])


def compared(
    reference: Reference, points: list[AggregatePoint], groups: dict[GroupKey, Trials]
) -> list[Comparison]:
    """Every published figure with its measured counterpart, per matching arm x variant; a
    published point no run matched is kept, measured None."""
    rows = []
    for published in reference.points:
        matched = [p for p in points if _matches(published, p)]
        for figure in _FIGURES:
            value = getattr(published, figure.field)
            if value is None:
                continue
            for p in matched:
                trials = groups.get((p.arm, p.variant, p.point.key))
                rows.append(
                    Comparison(
                        arm=p.arm,
                        variant=p.variant,
                        point=p.point.key,
                        figure=figure.name,
                        kind=figure.kind,
                        decimals=figure.decimals,
                        published=value,
                        measured=_measured(p, trials, figure.field),
                        trials=trials,
                    )
                )
            if not matched:
                rows.append(
                    Comparison(
                        arm=published.arm or "-",
                        variant=published.variant or "-",
                        point=_point_name(published),
                        figure=figure.name,
                        kind=figure.kind,
                        decimals=figure.decimals,
                        published=value,
                        measured=None,
                    )
                )
    return rows


def _writer(row: "Comparison") -> Callable[[float | None], str]:
    if row.kind == "rate":
        return _pct
    if row.kind == "time":
        return _ms
    return lambda v: "-" if v is None else f"{v:,.{row.decimals}f}"


def _difference(row: Comparison) -> str:
    if row.measured is None:
        return "not measured"
    if row.kind == "rate":
        return f"{100 * (row.measured - row.published):+.1f} pt"
    delta = row.measured - row.published
    absolute = _ms(delta) if row.kind == "time" else _writer(row)(delta)
    if not absolute.startswith("-"):
        absolute = "+" + absolute
    if row.published == 0:
        return absolute
    return f"{absolute} ({100 * delta / row.published:+.0f} %)"


def reference_table(
    reference: Reference, points: list[AggregatePoint], groups: dict[GroupKey, Trials]
) -> Table:
    """Published | measured | difference, one row per figure and point."""
    c = reference.conditions
    ran = ", ".join(
        part
        for part in (
            c.model,
            c.engine,
            c.hardware,
            None if c.workers is None else f"{c.workers} workers",
            None if c.kv_cache_tokens is None else f"{c.kv_cache_tokens:,} KV tokens per worker",
        )
        if part
    )
    table = Table(
        title=f"Against the published measurement: {reference.source}",
        caption="\n".join(
            line
            for line in (
                f"published ({reference.id}): {ran}",
                c.notes,
                "difference: measured - published (percentage points for rates)",
                legend(groups.values()),
            )
            if line
        ),
        caption_justify="left",
    )
    for column in ("arm / variant", "point", "figure", "published", "measured", "difference"):
        table.add_column(
            column, justify="left" if column in ("arm / variant", "figure") else "right"
        )
    for row in compared(reference, points, groups):
        write = _writer(row)
        table.add_row(
            f"{row.arm} / {row.variant}",
            row.point,
            row.figure,
            write(row.published),
            write(row.measured) + marks(row.trials),
            _difference(row),
        )
    return table


def reference_warnings(
    reference: Reference, spec: ExperimentSpec, records: list[RunRecord]
) -> list[str]:
    """Where this experiment ran other conditions than the published measurement: the
    difference column then measures those too."""
    c = reference.conditions
    warnings = []
    if c.model != spec.engine.model:
        warnings.append(f"the published run served {c.model}; this one {spec.engine.model}")
    if c.workers is not None and c.workers != spec.total_workers:
        warnings.append(f"the published run had {c.workers} workers; this one {spec.total_workers}")
    sizes = [p.kv_cache_tokens for r in records for p in r.pods if p.kv_cache_tokens]
    if c.kv_cache_tokens is not None and sizes:
        far = [n for n in sizes if abs(n - c.kv_cache_tokens) > 0.05 * c.kv_cache_tokens]
        if far:
            warnings.append(
                f"the published workers held {c.kv_cache_tokens:,} KV tokens; {len(far)} of "
                f"{len(sizes)} server starts here held more than 5 % more or less "
                f"({min(far):,}-{max(far):,})"
            )
    return warnings
