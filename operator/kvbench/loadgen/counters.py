"""Server-side counters per pod, read right before and right after the measured window.

Direct source: every worker's /metrics, fetched with httpx and parsed with
prometheus_client's exposition-format parser (no regexes). The Prometheus source lives in
`kvbench.loadgen.prometheus`; both produce `PodCounters` snapshots that `pod_deltas` turns
into `PodDelta`s (the counters' increase over the window).
"""

import asyncio
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field

from kvbench.api.base import ApiModel
from kvbench.api.units import parse_duration
from kvbench.loadgen.config import DirectMetrics

__all__ = [
    "COUNTERS",
    "OPTIONAL_COUNTERS",
    "CounterSource",
    "DirectCounters",
    "PodCounters",
    "PodDelta",
    "parse_metrics",
    "pod_deltas",
]

COUNTERS: dict[str, tuple[str, ...]] = {
    "prefix_cache_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "requests": ("vllm:request_success_total",),
    "ttft_seconds": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
}
"""PodDelta field -> vLLM sample names (v1 first, then the names of older releases). Samples
are summed over their labels (engine, model_name, finished_reason)."""
OPTIONAL_COUNTERS = frozenset({"ttft_seconds", "ttft_count"})
"""Counters a server may lack without a note (Dynamo's workers export no TTFT histogram):
their deltas stay None."""

CACHE_INFO = "vllm:cache_config_info"
_SETTLE_READS = 10


class PodCounters(ApiModel):
    """One pod's counters at one moment (None: the server does not export it)."""

    pod: str
    values: dict[str, float | None] = Field(default_factory=dict)
    kv_cache_tokens: int | None = None


class PodDelta(ApiModel):
    """One pod's counters' increase over the measured window: the load generator's own
    model, so that the experiment's status can change without changing this document."""

    pod: str
    kv_cache_tokens: int | None = Field(None, description="KV cache size of this server start")
    prefix_cache_queries: float = Field(0, description="Tokens queried in the window")
    prefix_cache_hits: float = Field(0, description="Tokens hit in the window")
    preemptions: float = 0
    requests: float = Field(0, description="Successful requests in the window")
    prompt_tokens: float = 0
    generation_tokens: float = 0
    ttft_seconds: float | None = Field(
        None,
        description="Sum of the TTFTs the server measured in the window (its "
        "vllm:time_to_first_token_seconds histogram: from its receipt of a request to its "
        "first token, so without the network and a router in front)",
    )
    ttft_count: float | None = Field(None, description="First tokens that histogram counted")

    @property
    def server_ttft_mean(self) -> float | None:
        """The server's own mean TTFT over the window; None where it measured none."""
        if self.ttft_seconds is None or not self.ttft_count:
            return None
        return self.ttft_seconds / self.ttft_count


class CounterSource(Protocol):
    """Reads every pod's counters once the data reflects everything up to `edge`."""

    notes: list[str]

    async def snapshot(self, edge: float) -> dict[str, PodCounters]:
        """`edge` is a Unix time: the snapshot must include all activity before it."""
        ...


def parse_metrics(pod: str, text: str) -> PodCounters:
    """The counters in one /metrics page."""
    wanted = {name: field for field, names in COUNTERS.items() for name in names}
    values: dict[str, float | None] = dict.fromkeys(COUNTERS)
    kv_tokens = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = wanted.get(sample.name)
            if field is not None:
                values[field] = (values[field] or 0.0) + sample.value
            elif sample.name == CACHE_INFO:
                kv_tokens = kv_cache_tokens(sample.labels) or kv_tokens
    return PodCounters(pod=pod, values=values, kv_cache_tokens=kv_tokens)


def kv_cache_tokens(labels: dict[str, str]) -> int | None:
    """KV capacity in tokens from cache_config_info's labels (num_gpu_blocks x block_size)."""
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None


class DirectCounters:
    """Scrapes each pod's /metrics URL until two reads `settle` seconds apart agree.

    A server may count a request a moment after streaming its last token (vLLM records
    the engine's stats as it processes the same output batch), so the first read right after
    the window can miss the last step; equal consecutive reads mean nothing is in flight.
    """

    def __init__(self, config: DirectMetrics) -> None:
        self._pods = dict(config.pods)
        self._timeout = parse_duration(config.timeout)
        self._settle = parse_duration(config.settle)
        self.notes: list[str] = []

    async def snapshot(self, edge: float) -> dict[str, PodCounters]:
        async with httpx.AsyncClient(timeout=self._timeout) as http:
            last = await self._read(http)
            for _ in range(_SETTLE_READS):
                await asyncio.sleep(self._settle)
                current = await self._read(http)
                if current == last:
                    return current
                last = current
        self.notes.append(
            f"counters still moving after {_SETTLE_READS} reads {self._settle:g}s apart"
        )
        return last

    async def _read(self, http: httpx.AsyncClient) -> dict[str, PodCounters]:
        pages = await asyncio.gather(*(http.get(url) for url in self._pods.values()))
        out = {}
        for pod, page in zip(self._pods, pages, strict=True):
            page.raise_for_status()
            out[pod] = parse_metrics(pod, page.text)
        return out


def pod_deltas(
    before: dict[str, PodCounters], after: dict[str, PodCounters]
) -> tuple[list[PodDelta], list[str]]:
    """Per-pod increase over the window, and notes on anything that makes it doubtful."""
    pods, notes = [], []
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            notes.append(f"pod {name} was read only {'after' if name in after else 'before'}")
            continue
        deltas = {}
        for field in COUNTERS:
            b, a = before[name].values.get(field), after[name].values.get(field)
            if a is None or b is None:
                if field not in OPTIONAL_COUNTERS:
                    notes.append(f"pod {name} does not export {field}")
                continue
            if a < b:
                notes.append(f"pod {name}: {field} went down ({b} -> {a}): the server restarted")
            deltas[field] = a - b
        pods.append(PodDelta(pod=name, kv_cache_tokens=after[name].kv_cache_tokens, **deltas))
    return pods, notes
