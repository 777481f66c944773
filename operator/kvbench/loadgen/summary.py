"""The figures of one run, as pure functions of its records and per-pod counter deltas.

Only measured requests count; warm-ups never do. Latencies are given on the wall clock and,
when the server is the simulator (its `kvbench` extension on every response), on the
simulated clock too, which is then the one reported (`latency_clock`): at a 20x speed-up the
wall-clock figures are mostly the client's and the loopback's own overhead. On a server in
real time or slower (time scale >= 1, as router arms run), a request's TTFT and e2e on the
simulated clock are the server's own plus the wall time the request spent outside it
(`outside_server`: the client, the network, a router in front), which takes as long on the
hardware; sped up, that time is this machine's work at many times the hardware's request
rate, and is left out.
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from kvbench.api.base import ApiModel
from kvbench.api.slo import Objectives
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.records import RequestRecord, e2e_field

__all__ = [
    "ClockFigures",
    "Goodput",
    "HitRates",
    "Stats",
    "Summary",
    "TurnFigures",
    "cache_reporting",
    "hit_rates",
    "outside_server",
    "percentile",
    "server_ttft_mean",
    "stats",
    "summarize_records",
    "timing_on_clock",
    "warnings",
]


class Stats(ApiModel):
    """Distribution of one latency, in seconds."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class ClockFigures(ApiModel):
    """Latencies and throughput on one clock (wall or simulated)."""

    window_seconds: float | None = None
    requests_per_second: float | None = None
    output_tokens_per_second: float | None = None
    ttft: Stats = Field(default_factory=Stats)
    ttft_hit: Stats = Field(default_factory=Stats)
    ttft_miss: Stats = Field(default_factory=Stats)
    itl: Stats = Field(default_factory=Stats)
    tpot: Stats = Field(default_factory=Stats)
    e2e: Stats = e2e_field(default_factory=Stats)


class HitRates(ApiModel):
    """The article's two measures side by side; a disagreement is a finding, not noise."""

    request_hit_rate: float | None = Field(None, description="Share with cached_tokens > 0")
    token_hit_rate_responses: float | None = Field(
        None, description="Sum of cached_tokens / sum of prompt_tokens, from the responses"
    )
    token_hit_rate_counters: float | None = Field(
        None, description="Sum of prefix_cache_hits / sum of prefix_cache_queries deltas"
    )
    agree: bool | None = Field(None, description="The two token hit rates agree to 3 decimals")
    reported: int = Field(
        0,
        description="Successful requests whose response gave cached_tokens (the others "
        "count as misses once any response of the run gave it)",
    )


class Goodput(ApiModel):
    """Requests that met every objective, on the reported clock. A failed request meets none:
    the shares are of all measured requests, so errors lower them (never dropped)."""

    objectives: dict[str, float] = Field(..., description="The objectives, in seconds")
    good: int = Field(0, description="Measured requests that met every objective")
    requests_per_second: float | None = Field(None, description="Good requests per second")
    attainment: float | None = Field(None, description="Share of measured requests that met all")
    met: dict[str, float] = Field(
        default_factory=dict, description="Share of measured requests that met each objective"
    )


class TurnFigures(ApiModel):
    """One turn of a conversation workload, over every conversation: does a turn find the
    history its previous turns left on the worker it reached?"""

    turn: int
    requests: int
    errors: int
    request_hit_rate: float | None = None
    token_hit_rate: float | None = Field(None, description="cached_tokens / prompt_tokens")
    prompt_tokens_mean: float | None = None
    ttft_p50: float | None = Field(None, description="On the reported clock")


class Summary(ApiModel):
    """Everything the run measured, derived from its records and counters."""

    requests: int = 0
    succeeded: int = 0
    errors: int = 0
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int = 0
    output_tokens: int = 0
    hit_rates: HitRates = Field(default_factory=HitRates)
    latency_clock: Literal["wall", "simulated", "scaled"] = "wall"
    wall: ClockFigures = Field(default_factory=ClockFigures)
    simulated: ClockFigures | None = None
    outside_server: Stats | None = Field(
        None,
        description="A simulator in real time: wall seconds each request spent outside the "
        "server before its first token reached the client (client, network, router), "
        "included in its simulated TTFT and e2e",
    )
    server_ttft_mean: float | None = Field(
        None,
        description="The servers' own mean TTFT over the window, from their "
        "vllm:time_to_first_token_seconds histograms (receipt to first token, on the server's "
        "clock: the simulator's is simulated): the client's TTFT less what the network and a "
        "router in front add. None unless every pod measured some",
    )
    goodput: Goodput | None = Field(None, description="When the run had objectives (slo)")
    turns: list[TurnFigures] = Field(
        default_factory=list, description="Conversation workloads: figures per turn"
    )

    @property
    def reported(self) -> ClockFigures:
        """The figures on `latency_clock`: the ones to quote."""
        if self.latency_clock == "wall" or self.simulated is None:
            return self.wall
        return self.simulated


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default) on sorted values."""
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def stats(values: Iterable[float]) -> Stats:
    ordered = sorted(values)
    if not ordered:
        return Stats()
    return Stats(
        count=len(ordered),
        mean=sum(ordered) / len(ordered),
        **{f"p{q}": percentile(ordered, q) for q in (50, 90, 95, 99)},
        max=ordered[-1],
    )


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def cache_reporting(records: Iterable[RequestRecord]) -> bool:
    """Whether the server reports cached tokens at all. Some vLLM releases leave
    `prompt_tokens_details` out when no token was cached, so once any response of the run
    reported a number, a successful response without one is a miss, not an unknown."""
    return any(r.cached_tokens is not None for r in records)


def _hit(r: RequestRecord, reporting: bool) -> bool | None:
    """`RequestRecord.hit`, with a silent response a miss once the server reports at all."""
    if r.hit is None and reporting:
        return False
    return r.hit


def hit_rates(ok: list[RequestRecord], pods: list[PodDelta] | None, reporting: bool) -> HitRates:
    rates = HitRates(reported=sum(1 for r in ok if r.cached_tokens is not None))
    if reporting and ok:
        rates.request_hit_rate = sum(1 for r in ok if _hit(r, reporting)) / len(ok)
        rates.token_hit_rate_responses = _ratio(
            sum(r.cached_tokens or 0 for r in ok), sum(r.prompt_tokens or 0 for r in ok)
        )
    if pods:
        rates.token_hit_rate_counters = _ratio(
            sum(p.prefix_cache_hits for p in pods), sum(p.prefix_cache_queries for p in pods)
        )
    a, b = rates.token_hit_rate_responses, rates.token_hit_rate_counters
    if a is not None and b is not None:
        rates.agree = round(a, 3) == round(b, 3)
    return rates


def server_ttft_mean(pods: list[PodDelta]) -> float | None:
    """The pods' TTFT histograms pooled: a mean over every first token they served, or None
    where a pod has no histogram or none counted any (a pod that served nothing counts)."""
    if not pods or any(p.ttft_seconds is None or p.ttft_count is None for p in pods):
        return None
    count = sum(p.ttft_count or 0.0 for p in pods)
    return sum(p.ttft_seconds or 0.0 for p in pods) / count if count else None


def outside_server(r: RequestRecord) -> float:
    """Wall seconds between the client sending the request and reading its first token that
    the simulated server's clock does not cover: the client, the network, a router in front
    (its real work, as on the hardware), and any lag of this machine in delivering the
    server's token. The server's share of the wall TTFT is its simulated TTFT times its time
    scale. Only a server in real time or slower has one: sped up (or never waiting: scale 0,
    virtual time) the client and this machine do many times the hardware's work per wall
    second, and their time would say more of this machine than of the hardware."""
    sim = r.sim
    if sim is None or sim.ttft is None or r.ttft is None or sim.time_scale is None:
        return 0.0
    if not _real_time(sim.time_scale):
        return 0.0
    return max(0.0, r.ttft - sim.ttft * sim.time_scale)


def _real_time(time_scale: float | None) -> bool:
    """Whether a simulated server ran in real time or slower (`outside_server`)."""
    return time_scale is not None and time_scale >= 1.0


def timing_on_clock(
    r: RequestRecord, simulated: bool, divide: float = 1.0
) -> tuple[float | None, float | None, list[float]]:
    """(TTFT, e2e, gaps) of a request on one clock: the simulator's (the server's own, moved
    by the time outside it; the gaps are the server's pacing), or wall / `divide`."""
    if simulated:
        if r.sim is None:
            return None, None, []
        outside = outside_server(r)
        first, total = r.sim.ttft, r.sim.e2e
        return (
            None if first is None else first + outside,
            None if total is None else total + outside,
            r.sim.itl,
        )
    if divide != 1.0:
        return (
            None if r.ttft is None else r.ttft / divide,
            None if r.e2e is None else r.e2e / divide,
            [gap / divide for gap in r.itl],
        )
    return r.ttft, r.e2e, r.itl


def _tpot(first: float | None, total: float | None, output_tokens: int | None) -> float | None:
    """Mean gap after the first token; None with one token or less (nothing to pace)."""
    if first is None or total is None or (output_tokens or 0) <= 1:
        return None
    return (total - first) / ((output_tokens or 0) - 1)


def _figures(
    ok: list[RequestRecord],
    window: float | None,
    simulated: bool,
    reporting: bool,
    divide: float = 1.0,
) -> ClockFigures:
    ttft, ttft_hit, ttft_miss, itl, tpot, e2e = [], [], [], [], [], []
    for r in ok:
        first, total, gaps = timing_on_clock(r, simulated, divide)
        itl.extend(gaps)
        if total is not None:
            e2e.append(total)
        if first is None:
            continue
        ttft.append(first)
        hit = _hit(r, reporting)
        if hit is not None:
            (ttft_hit if hit else ttft_miss).append(first)
        mean_gap = _tpot(first, total, r.output_tokens)
        if mean_gap is not None:
            tpot.append(mean_gap)
    tokens = sum(r.output_tokens or 0 for r in ok)
    return ClockFigures(
        window_seconds=window,
        requests_per_second=_ratio(len(ok), window or 0),
        output_tokens_per_second=_ratio(tokens, window or 0),
        ttft=stats(ttft),
        ttft_hit=stats(ttft_hit),
        ttft_miss=stats(ttft_miss),
        itl=stats(itl),
        tpot=stats(tpot),
        e2e=stats(e2e),
    )


def _meets(value: float | None, limit: float, name: str) -> bool:
    """A missing TPOT or gap (a one-token answer) meets its objective; a missing TTFT or e2e
    (nothing timed) does not."""
    if value is None:
        return name in ("tpot", "itl")
    return value <= limit


def goodput(
    measured: list[RequestRecord],
    objectives: Objectives,
    window: float | None,
    simulated: bool,
    divide: float = 1.0,
) -> Goodput:
    """Which measured requests met each objective and all of them. A latency a request does
    not have (TPOT or gaps of a one-token answer) cannot miss; a failed request misses all."""
    limits = objectives.limits()
    met = dict.fromkeys(limits, 0)
    good = 0
    for r in measured:
        if not r.ok:
            continue
        first, total, gaps = timing_on_clock(r, simulated, divide)
        values = {
            "ttft": first,
            "e2e": total,
            "tpot": _tpot(first, total, r.output_tokens),
            "itl": max(gaps, default=None),
        }
        passed = [name for name, limit in limits.items() if _meets(values[name], limit, name)]
        for name in passed:
            met[name] += 1
        good += len(passed) == len(limits)
    count = len(measured)
    return Goodput(
        objectives=limits,
        good=good,
        requests_per_second=_ratio(good, window or 0),
        attainment=_ratio(good, count),
        met={name: n / count for name, n in met.items()} if count else {},
    )


def turn_figures(
    measured: list[RequestRecord], reporting: bool, simulated: bool, divide: float = 1.0
) -> list[TurnFigures]:
    """Per turn of a conversation workload (none for other workloads)."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for r in measured:
        if r.turn is not None:
            by_turn.setdefault(r.turn, []).append(r)
    out = []
    for number, rows in sorted(by_turn.items()):
        ok = [r for r in rows if r.ok]
        prompts = sum(r.prompt_tokens or 0 for r in ok)
        first = sorted(t for r in ok if (t := timing_on_clock(r, simulated, divide)[0]) is not None)
        out.append(
            TurnFigures(
                turn=number,
                requests=len(rows),
                errors=len(rows) - len(ok),
                request_hit_rate=(
                    sum(1 for r in ok if _hit(r, reporting)) / len(ok) if ok and reporting else None
                ),
                token_hit_rate=_ratio(sum(r.cached_tokens or 0 for r in ok), prompts)
                if reporting
                else None,
                prompt_tokens_mean=prompts / len(ok) if ok else None,
                ttft_p50=percentile(first, 50) if first else None,
            )
        )
    return out


def _simulated_window(ok: list[RequestRecord], wall: float, time_scale: float | None) -> float:
    """Wall window / time scale; with time scale 0 (never wait) the longest span any one
    worker's clock covered, since workers' clocks have different origins."""
    if time_scale:
        return wall / time_scale
    spans: dict[str | None, tuple[float, float]] = {}
    for r in ok:
        if r.sim is None or r.sim.arrival is None or r.sim.e2e is None:
            continue
        lo, hi = spans.get(r.sim.worker, (r.sim.arrival, r.sim.arrival))
        spans[r.sim.worker] = (min(lo, r.sim.arrival), max(hi, r.sim.arrival + r.sim.e2e))
    return max((hi - lo for lo, hi in spans.values()), default=0.0)


def summarize_records(
    records: list[RequestRecord],
    pods: list[PodDelta] | None,
    window_seconds: float,
    time_scale: float | None = None,
    scaled_by: float | None = None,
    objectives: Objectives | None = None,
) -> Summary:
    """The run's summary. `pods` None: no counters were read. `time_scale`: wall seconds per
    simulated second, when the server is the simulator. `scaled_by`: the time scale of a
    sped-up server that does not report its own clock (Dynamo's mocker): its figures are
    then also given as wall / scale (`latency_clock` "scaled"), which multiplies the real
    overhead of the front end and the client by 1 / scale as well. `objectives`: the run's
    SLOs, for goodput on the reported clock."""
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    reporting = cache_reporting(r for r in records if r.ok)
    failed = Counter(r.error_kind or "" for r in measured if not r.ok)
    summary = Summary(
        requests=len(measured),
        succeeded=len(ok),
        errors=len(measured) - len(ok),
        errors_by_kind=dict(sorted(failed.items())),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        output_tokens=sum(r.output_tokens or 0 for r in ok),
        hit_rates=hit_rates(ok, pods, reporting),
        wall=_figures(ok, window_seconds, simulated=False, reporting=reporting),
    )
    if ok and all(r.sim is not None for r in ok):
        summary.latency_clock = "simulated"
        window = _simulated_window(ok, window_seconds, time_scale)
        summary.simulated = _figures(ok, window, simulated=True, reporting=reporting)
        if any(r.sim is not None and _real_time(r.sim.time_scale) for r in ok):
            summary.outside_server = stats([outside_server(r) for r in ok])
    elif ok and scaled_by and scaled_by != 1.0:
        summary.latency_clock = "scaled"
        summary.simulated = _figures(
            ok, window_seconds / scaled_by, simulated=False, reporting=reporting, divide=scaled_by
        )
    summary.server_ttft_mean = server_ttft_mean(pods or [])
    clock = summary.latency_clock
    divide = scaled_by if clock == "scaled" and scaled_by else 1.0
    if objectives is not None:
        summary.goodput = goodput(
            measured,
            objectives,
            summary.reported.window_seconds,
            simulated=clock == "simulated",
            divide=divide,
        )
    summary.turns = turn_figures(measured, reporting, clock == "simulated", divide)
    return summary


def warnings(
    summary: Summary,
    client_bound: list[str],
    configured_scale: float,
    observed_scale: float | None,
) -> list[str]:
    """What a reader of the figures must know before trusting them. `client_bound`: the
    reasons the client set the pace (`ClientHealth.reasons`), if it did."""
    out = []
    if summary.requests and summary.errors:
        out.append(f"{summary.errors} of {summary.requests} measured requests failed")
    if summary.requests and not summary.succeeded:
        out.append(
            "no measured request succeeded: nothing was measured, and whether the client set "
            "the pace cannot be judged"
        )
    if summary.succeeded and summary.hit_rates.reported == 0:
        out.append(
            "no response reported usage.prompt_tokens_details.cached_tokens: start vLLM with "
            "--enable-prompt-tokens-details (some releases also leave it out on a miss, so a "
            "run without a single hit reads the same)"
        )
    if summary.hit_rates.agree is False:
        out.append(
            f"the token hit rates disagree: responses "
            f"{summary.hit_rates.token_hit_rate_responses:.4f} vs counters "
            f"{summary.hit_rates.token_hit_rate_counters:.4f} (preemptions recount queries)"
        )
    if client_bound:
        out.append("client-bound: " + "; ".join(client_bound))
    if observed_scale is not None and observed_scale != configured_scale:
        out.append(
            f"the simulator runs at time scale {observed_scale} but the config says "
            f"{configured_scale}: arrival schedules were stretched by the wrong factor"
        )
    return out
