"""Tables in the shape of the source reports, as pure functions of recorded runs."""

from collections import defaultdict
from collections.abc import Callable
from statistics import median

from rich.table import Table

from kvbench.api import AggregatePoint, ExperimentSpec, RunRecord
from kvbench.report.formats import milliseconds as _ms
from kvbench.report.formats import percent as _pct
from kvbench.report.trials import GroupKey, Trials, group_trials, legend, marks

__all__ = [
    "goodput_table",
    "hit_miss_table",
    "hit_rate_table",
    "latency_clock",
    "per_pod_table",
    "throughput_table",
    "ttft_table",
    "turn_table",
]


def latency_clock(records: list[RunRecord]) -> str:
    """`simulated` when any run's latencies are on a sped-up engine's clock (the simulator's
    own, or wall / time scale for Dynamo's mocker), else `wall`."""
    clocks = {r.summary.latency_clock for r in records}
    return "simulated" if clocks & {"simulated", "scaled"} else "wall"


def _arms(points: list[AggregatePoint]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((p.arm, p.variant) for p in points))


def _row_key(point: AggregatePoint) -> str:
    if point.point.prefixes is not None:
        return f"{point.point.prefixes}"
    if point.point.request_rate is not None:
        return f"{point.point.request_rate:g} req/s"
    return "-"


def _grid(points: list[AggregatePoint], arm: tuple[str, str]):
    """{row: {concurrency: point}} for one arm x variant."""
    grid: dict[str, dict[int, AggregatePoint]] = defaultdict(dict)
    for p in points:
        if (p.arm, p.variant) == arm:
            grid[_row_key(p)][p.point.concurrency] = p
    return grid


def _concurrencies(points: list[AggregatePoint]) -> list[int]:
    return sorted({p.point.concurrency for p in points})


def _marks(groups: dict[GroupKey, Trials], p: AggregatePoint) -> str:
    return marks(groups.get((p.arm, p.variant, p.point.key)))


def _caption(*lines: str | None) -> str | None:
    kept = [line for line in lines if line]
    return "\n".join(kept) or None


MODEL_LINE = (
    "model service: not measured; the hit rate of an LRU cache of a worker's KV size that sees "
    "the whole stream (Che's approximation under the prefixes' popularity; uniform: about "
    "min(1, held / P), held = KV tokens / prompt tokens)"
)
BOUND_LINE = (
    "model affinity: not measured; the same when each worker sees only the prefixes prefix "
    "affinity gives it"
)


def hit_rate_table(
    spec: ExperimentSpec,
    points: list[AggregatePoint],
    groups: dict[GroupKey, Trials] | None = None,
) -> Table:
    """Hit rate per prefix count and concurrency (requests that hit | hit tokens / queried
    tokens from the servers' counters), with the capacity model beside it."""
    groups = groups or {}
    concurrencies = _concurrencies(points)
    table = Table(
        title=f"Hit rate, requests | tokens, median of trials ({spec.total_workers} workers)",
        caption=_caption(
            "requests: share of requests with cached tokens ('-': the front end reports none); "
            "tokens: hit tokens / queried tokens of the workers' counters",
            MODEL_LINE,
            BOUND_LINE,
            legend(groups.values()),
        ),
        caption_justify="left",
    )
    table.add_column("arm / variant")
    table.add_column("prefixes", justify="right")
    table.add_column("popularity")
    for c in concurrencies:
        table.add_column(f"conc {c}", justify="right")
    table.add_column("model service", justify="right")
    table.add_column("model affinity", justify="right")
    for arm in _arms(points):
        for row, by_conc in _grid(points, arm).items():
            cells = [
                f"{_pct(by_conc[c].request_hit_rate)} | {_pct(by_conc[c].token_hit_rate)}"
                f"{_marks(groups, by_conc[c])}"
                if c in by_conc
                else "-"
                for c in concurrencies
            ]
            first = next(iter(by_conc.values()))
            table.add_row(
                f"{arm[0]} / {arm[1]}",
                row,
                first.popularity or "-",
                *cells,
                _pct(first.predicted_hit_rate),
                _pct(first.predicted_affinity_hit_rate),
            )
    return table


def _point_table(
    points: list[AggregatePoint],
    title: str,
    cell: Callable[[AggregatePoint], str],
    groups: dict[GroupKey, Trials] | None,
) -> Table:
    """One row per arm x variant x prefix count (or rate), one column per concurrency."""
    groups = groups or {}
    table = Table(title=title, caption=legend(groups.values()), caption_justify="left")
    table.add_column("arm / variant")
    table.add_column("point", justify="right")
    concurrencies = _concurrencies(points)
    for c in concurrencies:
        table.add_column(f"conc {c}", justify="right")
    for arm in _arms(points):
        for row, by_conc in _grid(points, arm).items():
            cells = [
                cell(by_conc[c]) + _marks(groups, by_conc[c]) if c in by_conc else "-"
                for c in concurrencies
            ]
            table.add_row(f"{arm[0]} / {arm[1]}", row, *cells)
    return table


def ttft_table(
    points: list[AggregatePoint], clock: str, groups: dict[GroupKey, Trials] | None = None
) -> Table:
    """TTFT p50/p99 per point."""
    return _point_table(
        points,
        f"TTFT p50 / p99 ({clock} ms)",
        lambda p: f"{_ms(p.ttft_p50)} / {_ms(p.ttft_p99)}",
        groups,
    )


def throughput_table(
    points: list[AggregatePoint], clock: str, groups: dict[GroupKey, Trials] | None = None
) -> Table:
    """Requests and output tokens per second per point."""

    def cell(p: AggregatePoint) -> str:
        if p.requests_per_second is None:
            return "-"
        return f"{p.requests_per_second:.1f} | {p.output_tokens_per_second or 0:,.0f}"

    return _point_table(points, f"Throughput, req/s | output tok/s ({clock} time)", cell, groups)


def goodput_table(
    spec: ExperimentSpec,
    points: list[AggregatePoint],
    clock: str,
    groups: dict[GroupKey, Trials] | None = None,
) -> Table:
    """Good requests per second and the share that met every objective, per point."""
    assert spec.slo is not None

    def cell(p: AggregatePoint) -> str:
        if p.goodput is None:
            return "-"
        return f"{p.goodput:.2f} | {_pct(p.slo_attainment)}"

    table = _point_table(
        points,
        f"Goodput, good req/s | share of requests meeting every objective ({clock} time)",
        cell,
        groups,
    )
    table.caption = _caption(
        f"objectives: {spec.slo.label} (tpot: mean gap after the first token; itl: every gap); "
        "a failed request meets none",
        table.caption if isinstance(table.caption, str) else None,
    )
    return table


def turn_table(
    points: list[AggregatePoint], clock: str, groups: dict[GroupKey, Trials] | None = None
) -> Table:
    """Conversation workloads: per turn, the token hit rate and TTFT p50 (medians)."""
    groups = groups or {}
    turns = sorted({t.turn for p in points for t in p.turns})
    table = Table(
        title=f"Per turn: token hit rate | TTFT p50 ({clock} ms), median of trials",
        caption=_caption(
            "token hit rate: cached tokens / prompt tokens of that turn's requests (a turn "
            "resends the conversation so far: it hits where its history was left)",
            legend(groups.values()),
        ),
        caption_justify="left",
    )
    table.add_column("arm / variant")
    table.add_column("point", justify="right")
    for turn in turns:
        table.add_column(f"turn {turn}", justify="right")
    for p in points:
        by_turn = {t.turn: t for t in p.turns}
        cells = [
            f"{_pct(by_turn[t].token_hit_rate)} | {_ms(by_turn[t].ttft_p50)}"
            if t in by_turn
            else "-"
            for t in turns
        ]
        table.add_row(
            f"{p.arm} / {p.variant}", p.point.key, *(c + _marks(groups, p) for c in cells)
        )
    return table


def hit_miss_table(records: list[RunRecord], clock: str) -> Table:
    """Median TTFT of hits and of misses per point (medians of the runs' medians)."""
    flags = group_trials(records)
    table = Table(
        title=f"TTFT of hits vs misses, p50 ({clock} ms)",
        caption=legend(flags.values()),
        caption_justify="left",
    )
    for column in ("arm / variant", "point", "hit", "miss", "miss / hit"):
        table.add_column(column, justify="left" if column == "arm / variant" else "right")
    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.error is None:
            groups[(r.arm, r.variant, r.point.key)].append(r)
    for key, runs in groups.items():
        hits = [r.summary.ttft_hit_p50 for r in runs if r.summary.ttft_hit_p50 is not None]
        misses = [r.summary.ttft_miss_p50 for r in runs if r.summary.ttft_miss_p50 is not None]
        hit = median(hits) if hits else None
        miss = median(misses) if misses else None
        ratio = f"{miss / hit:.1f}x" if hit and miss else "-"
        mark = marks(flags.get(key))
        table.add_row(f"{key[0]} / {key[1]}", key[2], _ms(hit) + mark, _ms(miss) + mark, ratio)
    return table


def per_pod_table(records: list[RunRecord]) -> Table:
    """Per pod and point (medians over trials): token hit rate, and hit tokens / requests
    served, so it shows where the hits land and how the load was spread."""
    flags = group_trials(records)
    keys = list(dict.fromkeys(r.point.key for r in records))
    table = Table(
        title="Per pod: token hit rate (prefix-cache hits / queries), requests served; "
        "median of trials",
        caption=legend(flags.values()),
        caption_justify="left",
    )
    table.add_column("arm / variant")
    table.add_column("pod")
    for key in keys:
        table.add_column(key, justify="right")
    cells: dict[tuple[str, str, str], dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in records:
        for pod in r.pods:
            if pod.prefix_cache_queries > 0:
                cells[(r.arm, r.variant, pod.pod)][r.point.key].append(
                    (pod.prefix_cache_hits / pod.prefix_cache_queries, pod.requests)
                )
    for (arm, variant, pod), by_key in cells.items():
        row = []
        for key in keys:
            values = by_key.get(key)
            if not values:
                row.append("-")
                continue
            rate = median(v[0] for v in values)
            served = median(v[1] for v in values)
            row.append(f"{_pct(rate)}, {served:,.0f} req{marks(flags.get((arm, variant, key)))}")
        table.add_row(f"{arm} / {variant}", pod, *row)
    return table
