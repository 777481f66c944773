"""Per-worker counters from a `dynamo.mocker` worker's system status server (`/metrics`).

What Dynamo 1.6.1's mocker exposes per worker (Prometheus text, one page per process):

- `dynamo_component_requests_total{dynamo_endpoint="generate", worker_id="<hex>"}`:
  requests the worker served (a counter); the `worker_id` label is the worker's instance
  id in hex, the id the frontend reports in `nvext.worker_id` in decimal.
- `dynamo_component_inflight_requests{dynamo_endpoint="generate"}`: requests in flight.
- `vllm:num_preemptions_total` (counter), `vllm:num_requests_running`,
  `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (gauges).
- `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds` histograms.

There is no prefix-cache counter (vLLM's `vllm:prefix_cache_queries_total` and
`vllm:prefix_cache_hits_total` are absent): per-worker cache hits come from the requests
themselves (`usage.prompt_tokens_details.cached_tokens`, attributed to the worker in
`nvext.worker_id`, read by `kvbench.loadgen.client`). The counters here serve to check those
attributions (requests per worker) and to see preemptions.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

__all__ = ["WorkerCounters", "parse_worker_metrics", "scrape_worker"]

_GENERATE = "generate"


class WorkerCounters(BaseModel):
    """One scrape of one worker; counters are cumulative since the worker started."""

    model_config = ConfigDict(frozen=True)

    instance_id: int | None
    requests_total: float = 0.0
    inflight_requests: float = 0.0
    preemptions_total: float = 0.0
    kv_cache_usage: float = 0.0
    ttft_count: float = 0.0
    ttft_sum_seconds: float = 0.0

    def minus(self, before: WorkerCounters) -> WorkerCounters:
        """Counter increments since `before` (gauges keep this scrape's value)."""
        return self.model_copy(
            update={
                "requests_total": self.requests_total - before.requests_total,
                "preemptions_total": self.preemptions_total - before.preemptions_total,
                "ttft_count": self.ttft_count - before.ttft_count,
                "ttft_sum_seconds": self.ttft_sum_seconds - before.ttft_sum_seconds,
            }
        )


def parse_worker_metrics(text: str) -> WorkerCounters:
    """The counters of one worker's `/metrics` page."""
    values: dict[str, float] = {}
    instance_id: int | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name.startswith("dynamo_component_"):
                if labels.get("dynamo_endpoint") != _GENERATE:
                    continue
                if "worker_id" in labels:
                    instance_id = int(labels["worker_id"], 16)
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return WorkerCounters(
        instance_id=instance_id,
        requests_total=values.get("dynamo_component_requests_total", 0.0),
        inflight_requests=values.get("dynamo_component_inflight_requests", 0.0),
        preemptions_total=values.get("vllm:num_preemptions_total", 0.0),
        kv_cache_usage=values.get("vllm:kv_cache_usage_perc", 0.0),
        ttft_count=values.get("vllm:time_to_first_token_seconds_count", 0.0),
        ttft_sum_seconds=values.get("vllm:time_to_first_token_seconds_sum", 0.0),
    )


def scrape_worker(metrics_url: str, timeout: float = 5.0) -> WorkerCounters:
    """GET and parse one worker's `/metrics`."""
    response = httpx.get(metrics_url, timeout=timeout)
    response.raise_for_status()
    return parse_worker_metrics(response.text)
