"""Per-pod counters from Prometheus (prometheus-api-client), for clusters that already scrape
the workers.

Prometheus only knows what it scraped, so each edge of the window waits for a scrape of every
pod newer than the edge. The pre-window value is then exactly the counter after the warm-up
(nothing runs between the warm-up's end and the first measured request), and the post-window
value includes every measured request.

The window's increase is the difference of those two instant values. PromQL's `increase()`
extrapolates to the ends of its range, which over a window of a few scrapes overstates a
counter that was flat at both ends by up to a scrape interval's share, so it is used only
when a counter went down in the window (a restart), where the plain difference is wrong.
"""

import asyncio
import time
from typing import Any

from prometheus_api_client import PrometheusConnect

from kvbench.api.units import parse_duration
from kvbench.loadgen.config import PrometheusMetrics
from kvbench.loadgen.counters import CACHE_INFO, COUNTERS, PodCounters, kv_cache_tokens

__all__ = ["PrometheusCounters"]

_POLL = 0.5


class PrometheusCounters:
    """A `CounterSource` over the Prometheus HTTP API, for one window (two snapshots)."""

    def __init__(self, config: PrometheusMetrics) -> None:
        self._config = config
        self._label = config.pod_label
        self._prom = PrometheusConnect(url=config.url, disable_ssl=True)
        self._wait = parse_duration(config.scrape_wait)
        self._timeout = parse_duration(config.timeout)
        self._first: dict[str, PodCounters] | None = None
        self._first_time = 0.0
        self.notes: list[str] = []

    def selector(self, metric: str) -> str:
        """`metric{pod=~".+", label="value", ...}` for the configured pods."""
        matchers = [f'{self._label}=~".+"']
        matchers += [f'{k}="{_escape(v)}"' for k, v in sorted(self._config.selector.items())]
        return f"{metric}{{{','.join(matchers)}}}"

    async def snapshot(self, edge: float) -> dict[str, PodCounters]:
        """Every pod's counters from a scrape newer than `edge`."""
        at = await self._await_scrape(edge)
        out = await asyncio.to_thread(self._read, at)
        if self._first is None:
            self._first, self._first_time = out, at
        else:
            await asyncio.to_thread(self._fix_resets, out, at)
        return out

    async def _await_scrape(self, edge: float) -> float:
        """Wait until every pod has a sample at or after `edge`; the time to query at.

        `up` exists for every scraped target, whatever the server exports."""
        query = f"max by ({self._label}) (timestamp({self.selector('up')}))"
        deadline = time.monotonic() + self._wait
        while True:
            rows = await asyncio.to_thread(self._query, query, None)
            seen = {row["metric"].get(self._label): float(row["value"][1]) for row in rows}
            pods = self._config.pods or list(seen)
            if pods and all(seen.get(p, 0.0) >= edge for p in pods):
                return max(time.time(), max(seen.values()))
            if time.monotonic() > deadline:
                missing = [p for p in pods if seen.get(p, 0.0) < edge] or ["(no pod matched)"]
                raise TimeoutError(
                    f"Prometheus has no scrape newer than the window edge for {missing} after "
                    f"{self._wait:g}s (query: {query})"
                )
            await asyncio.sleep(_POLL)

    def _query(self, query: str, at: float | None) -> list[dict[str, Any]]:
        params = {"time": f"{at:.3f}"} if at is not None else None
        return self._prom.custom_query(query=query, params=params, timeout=self._timeout)

    def _read(self, at: float) -> dict[str, PodCounters]:
        pods: dict[str, PodCounters] = {}

        def pod(name: str) -> PodCounters:
            return pods.setdefault(name, PodCounters(pod=name, values=dict.fromkeys(COUNTERS)))

        for field, names in COUNTERS.items():
            for metric in names:
                rows = self._query(f"sum by ({self._label}) ({self.selector(metric)})", at)
                for row in rows:
                    counters = pod(row["metric"][self._label])
                    if counters.values.get(field) is None:
                        counters.values[field] = float(row["value"][1])
        for row in self._query(self.selector(CACHE_INFO), at):
            counters = pod(row["metric"][self._label])
            counters.kv_cache_tokens = kv_cache_tokens(row["metric"]) or counters.kv_cache_tokens
        wanted = self._config.pods
        return {name: c for name, c in pods.items() if wanted is None or name in wanted}

    def _fix_resets(self, after: dict[str, PodCounters], at: float) -> None:
        """Where a counter went down, replace the end value by start + increase() over the
        window, so the delta survives a restart (approximately, as increase() is)."""
        assert self._first is not None
        window = max(1, round(at - self._first_time))
        for name, counters in after.items():
            start = self._first.get(name)
            if start is None:
                continue
            for field, value in counters.values.items():
                base = start.values.get(field)
                if value is None or base is None or value >= base:
                    continue
                expr = f"sum by ({self._label}) (increase({self.selector(COUNTERS[field][0])}"
                rows = self._query(f"{expr}[{window}s]))", at)
                grown = {r["metric"][self._label]: float(r["value"][1]) for r in rows}
                if name in grown:
                    counters.values[field] = base + grown[name]
                    self.notes.append(
                        f"pod {name}: {field} went down in the window (a restart); "
                        "its delta is Prometheus' increase(), an extrapolation"
                    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
