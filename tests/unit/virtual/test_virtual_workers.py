"""A virtual worker's counters are what a scrape of the server's `/metrics` would read, with or
without the latency histograms it does not keep."""

from kvbench.loadgen.counters import OPTIONAL_COUNTERS, parse_metrics
from kvbench.loadgen.workload import Request
from kvbench.sim.metrics import render_metrics
from kvbench.virtual.workers import VirtualWorker

ARGV = ["serve", "Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--kv-cache-memory-bytes",
        "500000000", "--gpu-memory-utilization", "0.01", "--worker-id", "w"]  # fmt: skip


def _serve(worker: VirtualWorker) -> None:
    """Twelve requests sharing a prefix, all at once: hits, a small cache, preemptions."""
    core = worker.engine.core
    for i in range(12):
        prompt = tuple(range(1000, 3000)) + tuple(range(5000 + 100 * i, 5300 + 100 * i))
        request = worker.admit(Request("measured", i, prompt, len(prompt), 200), None)
        request.engine_arrival_time = 0.001 * i
        core.add_request(request)
    while core.step() is not None:
        pass


def test_counters_are_the_metrics_page() -> None:
    """Catches a counter read from the wrong tally (tokens for requests, hits for queries) or
    one that skipping the histograms changed."""
    virtual, observed = VirtualWorker("w", ARGV), VirtualWorker("w", ARGV)
    observed.engine.core.stats.observe_latencies = True
    _serve(virtual)
    _serve(observed)
    core = observed.engine.core
    _, render = render_metrics(
        core.stats,
        core.gauges,
        model_name=observed.model,
        cache_info=observed.engine.cache_config_info(),
    )
    page = parse_metrics("w", render().decode())
    # less the TTFT histogram, which a virtual worker does not keep (its clients read every
    # request's own simulated TTFT): its run has no servers' mean rather than a wrong one
    kept = {k: v for k, v in page.values.items() if k not in OPTIONAL_COUNTERS}
    assert virtual.counters() == page.model_copy(update={"values": kept})
    assert page.values["ttft_count"] == 12
    assert page.values["preemptions"] > 0 and page.values["prefix_cache_hits"] > 0
    assert page.values["requests"] == 12
