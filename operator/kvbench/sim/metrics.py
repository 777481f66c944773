"""``/metrics`` with vLLM's metric names, types, buckets and labels (v1 PrometheusStatLogger).

Every series carries ``model_name`` (the first served model name) and ``engine``
(``"0"``). Counters are exposed with ``_total``; prefix-cache counters count tokens and
leave out the lookups of preempted requests, as vLLM does. Gauges are read from the
engine at scrape time; histograms are kept as plain bucket counts updated by the
engine (a bisect per observation) and rendered by a custom collector, which keeps the
per-token cost of metrics far below prometheus_client's locked ``observe``.
All durations are virtual seconds.

A scrape renders on the event loop that streams tokens, so its cost delays every token due
meanwhile: ``generate_latest`` over the collector takes 3-6 ms (a family object and a sample
per bucket), which at 3 scrapes a second made the first token leave visibly after its
simulated time. The text is therefore rendered from a template made once by
``generate_latest`` itself (every line but the values is fixed for a server's life) filled
with the values in the collector's order: the same bytes in a tenth of the time.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kvbench.sim.request import FinishReason, SimRequest

__all__ = [
    "ENGINE_LABELS",
    "EngineGauges",
    "EngineStats",
    "Histogram",
    "build_1_2_5_buckets",
    "render_metrics",
]

ENGINE_LABELS = ["model_name", "engine"]

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                           30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                           7680.0]  # fmt: skip
ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
N_BUCKETS = [1, 2, 5, 10, 20]


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's 1-2-5 bucket series up to ``max_value`` (token-count histograms)."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


class Histogram:
    """Bucket counts of one series; ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = [float(b) for b in bounds]
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((floatToGoString(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


@dataclass
class EngineStats:
    """Counters and histograms the engine updates; read by the collector."""

    max_model_len: int
    observe_latencies: bool = True
    """False: counters only, no histogram (virtual time reads counters and renders no page)."""
    prompt_tokens: int = 0
    generation_tokens: int = 0
    request_success: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tokens = build_1_2_5_buckets(self.max_model_len)
        self.request_success = {r.value: 0 for r in FinishReason} | {"error": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.histograms = {
            "vllm:time_to_first_token_seconds": self.ttft,
            "vllm:inter_token_latency_seconds": self.itl,
            "vllm:request_time_per_output_token_seconds": Histogram(ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": Histogram(REQUEST_LATENCY_BUCKETS),
            "vllm:request_queue_time_seconds": Histogram(REQUEST_LATENCY_BUCKETS),
            "vllm:request_inference_time_seconds": Histogram(REQUEST_LATENCY_BUCKETS),
            "vllm:request_prefill_time_seconds": Histogram(REQUEST_LATENCY_BUCKETS),
            "vllm:request_decode_time_seconds": Histogram(REQUEST_LATENCY_BUCKETS),
            "vllm:request_prompt_tokens": Histogram(tokens),
            "vllm:request_generation_tokens": Histogram(tokens),
            "vllm:request_prefill_kv_computed_tokens": Histogram(tokens),
            "vllm:request_max_num_generation_tokens": Histogram(tokens),
            "vllm:request_params_max_tokens": Histogram(tokens),
            "vllm:request_params_n": Histogram(N_BUCKETS),
            "vllm:iteration_tokens_total": Histogram(ITERATION_TOKEN_BUCKETS),
        }
        self.iteration_tokens = self.histograms["vllm:iteration_tokens_total"]

    def on_step(self, produced: list[SimRequest]) -> None:
        """Token-level statistics of one step (TTFT, ITL, token counters)."""
        prompt = 0
        ttft, itl = self.ttft, self.itl
        if not self.observe_latencies:
            for request in produced:
                if len(request.token_times) == 1:
                    prompt += request.num_prompt_tokens
            self.prompt_tokens += prompt
            self.generation_tokens += len(produced)
            return
        for request in produced:
            times = request.token_times
            if len(times) == 1:
                prompt += request.num_prompt_tokens
                ttft.observe(times[0] - request.arrival_time)
            else:
                itl.observe(times[-1] - times[-2])
        self.prompt_tokens += prompt
        self.generation_tokens += len(produced)
        self.iteration_tokens.observe(prompt + len(produced))

    def on_finished(self, request: SimRequest) -> None:
        """Request-level statistics of a finished or aborted request."""
        reason = request.finish_reason.value if request.finish_reason else "error"
        self.request_success[reason] += 1
        if not self.observe_latencies:
            return
        h = self.histograms
        finish = request.finish_time or 0.0
        scheduled = request.first_scheduled_time
        first = request.first_token_time
        num_gen = request.num_output_tokens
        h["vllm:e2e_request_latency_seconds"].observe(finish - request.arrival_time)
        h["vllm:request_queue_time_seconds"].observe(
            (scheduled if scheduled is not None else finish) - request.engine_arrival_time
        )
        if scheduled is not None:
            h["vllm:request_inference_time_seconds"].observe(finish - scheduled)
            h["vllm:request_prefill_time_seconds"].observe((first or finish) - scheduled)
        h["vllm:request_decode_time_seconds"].observe(finish - (first or finish))
        mean_itl = (finish - first) / (num_gen - 1) if first is not None and num_gen > 1 else 0.0
        h["vllm:request_time_per_output_token_seconds"].observe(mean_itl)
        h["vllm:request_prompt_tokens"].observe(request.num_prompt_tokens)
        h["vllm:request_generation_tokens"].observe(num_gen)
        h["vllm:request_prefill_kv_computed_tokens"].observe(
            request.num_prompt_tokens - max(request.num_cached_tokens, 0)
        )
        h["vllm:request_max_num_generation_tokens"].observe(request.max_tokens)
        h["vllm:request_params_max_tokens"].observe(request.max_tokens)
        h["vllm:request_params_n"].observe(1)


@dataclass(frozen=True)
class EngineGauges:
    """Values read from the engine at scrape time."""

    running: int
    waiting: int
    kv_cache_usage: float
    num_preemptions: int
    prefix_queries: int
    prefix_hits: int


_COUNTER_DOCS = {
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
}


class _SimCollector(Collector):
    def __init__(
        self,
        stats: EngineStats,
        gauges: Callable[[], EngineGauges],
        labels: list[str],
        cache_info: dict[str, str],
    ) -> None:
        self.stats = stats
        self.gauges = gauges
        self.labels = labels
        self.cache_info = cache_info
        self.created = time.time()

    def collect(self) -> Iterator[Metric]:
        labels, stats, g = self.labels, self.stats, self.gauges()
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             g.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             g.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             g.kv_cache_usage),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, doc, labels=ENGINE_LABELS)
            gauge.add_metric(labels, value)
            yield gauge
        for name, value in (
            ("vllm:prefix_cache_queries", g.prefix_queries),
            ("vllm:prefix_cache_hits", g.prefix_hits),
            ("vllm:num_preemptions", g.num_preemptions),
            ("vllm:prompt_tokens", stats.prompt_tokens),
            ("vllm:generation_tokens", stats.generation_tokens),
        ):
            counter = CounterMetricFamily(name, _COUNTER_DOCS[name], labels=ENGINE_LABELS)
            counter.add_metric(labels, value, created=self.created)
            yield counter
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*ENGINE_LABELS, "finished_reason"],
        )
        for reason, value in stats.request_success.items():
            success.add_metric([*labels, reason], value, created=self.created)
        yield success
        for name, hist in stats.histograms.items():
            family = HistogramMetricFamily(name, _HIST_DOCS[name], labels=ENGINE_LABELS)
            family.add_metric(labels, hist.cumulative(), hist.sum)
            yield family
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(self.cache_info),
        )
        info.add_metric(list(self.cache_info.values()), 1)
        yield info


_HIST_DOCS = {
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds":
        "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds":
        "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_prefill_kv_computed_tokens":
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    "vllm:request_max_num_generation_tokens":
        "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
}  # fmt: skip


class _Template:
    """The exposition text of one collector with its values left out: ``render`` fills them in
    the order ``_SimCollector.collect`` yields them. ``_created`` samples (constant) stay in the
    text; every other sample line is a slot."""

    def __init__(self, collector: _SimCollector, text: str) -> None:
        self.collector = collector
        statics, current = [], []
        for line in text.splitlines(keepends=True):
            name = line.partition("{")[0]
            if line.startswith("#") or name.endswith("_created"):
                current.append(line)
                continue
            current.append(line[: line.rindex(" ") + 1])
            statics.append("".join(current))
            current = ["\n"]
        statics.append("".join(current))
        self.statics = statics
        if len(self._values()) != len(statics) - 1:
            raise RuntimeError("the metrics template and the collector disagree")

    def _values(self) -> list[float]:
        collector = self.collector
        stats, g = collector.stats, collector.gauges()
        values: list[float] = [
            g.running, g.waiting, g.kv_cache_usage, g.prefix_queries, g.prefix_hits,
            g.num_preemptions, stats.prompt_tokens, stats.generation_tokens,
            *stats.request_success.values(),
        ]  # fmt: skip
        for hist in stats.histograms.values():
            running = 0
            for count in hist.counts:
                running += count
                values.append(running)
            values.append(running)
            values.append(hist.sum)
        values.append(1)
        return values

    def render(self) -> bytes:
        values = map(floatToGoString, self._values())
        lines = chain.from_iterable(zip(self.statics[:-1], values, strict=True))
        return "".join(chain(lines, self.statics[-1:])).encode()


def render_metrics(
    stats: EngineStats,
    gauges: Callable[[], EngineGauges],
    *,
    model_name: str,
    cache_info: dict[str, str],
) -> tuple[CollectorRegistry, Callable[[], bytes]]:
    """A registry holding the simulator's metrics and a function rendering it as text, byte
    for byte as ``generate_latest(registry)`` would."""
    registry = CollectorRegistry(auto_describe=False)
    collector = _SimCollector(stats, gauges, [model_name, "0"], cache_info)
    registry.register(collector)
    template = _Template(collector, generate_latest(registry).decode())
    return registry, template.render
