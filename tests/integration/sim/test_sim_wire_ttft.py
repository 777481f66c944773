"""Issue 14, item 7: at time scale 1 the TTFT the simulator reports (per response and in its
histogram) is the TTFT a client sees on the wire, with ``/metrics`` scraped meanwhile, and the
gaps between tokens are the ones it reported.

Both are measured on one run (tests/integration/sim/wire_ttft.py): concurrency 4, 1,800-token
text prompts, streamed, 3 scrapes a second. The wire is timed by the kernel's socket
timestamps (the request's last byte out, the first event's bytes in), so a client thread run
late by the loaded machine does not count; what remains is the simulator's own latency:
work it does outside its simulated clock (tokenizing, rendering ``/metrics``) and its event
loop's timer resolution."""

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from wire_ttft import MODEL, client_itl, measure, percentile, sim_process, summary

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.metrics import render_metrics
from kvbench.sim.request import SimRequest

REQUESTS = 120
P50_MS = 2.0
P99_MS = 10.0
"""Wire minus reported TTFT. The goal is 1 ms at p50 and 3 ms at p99 (GOAL_MS), met on a
quiet machine (bench/sim_wire_ttft.py says whether); on a loaded 2-core CI machine other
processes take the CPU for milliseconds at a time, so the test allows for that and still
fails on what it guards against: TTFT reported before tokenizing (the issue measured p50
8-10 ms, p90 16-19 ms) and ``/metrics`` renders of 3-6 ms blocking the loop."""
ITL_REL = 0.02
"""Client ITL, wire against reported: with every token but the first released a step early
it read 1 / (tokens - 1) low (2-9 % on the issue's clients, 14 % at 8 tokens here)."""
LONG_REQUEST_MS = 4.0
"""Bound on the median of three lone requests: a few timer ticks, a fifth of the tokenizing."""


@pytest.mark.timeout(180)
def test_reported_ttft_is_the_wire_ttft(tmp_path: Path) -> None:
    with sim_process(tmp_path / "sim.log") as (host, port):
        run = measure(host, port, requests=REQUESTS)
    assert len(run.samples) == REQUESTS
    assert run.scrapes >= 5, "the scraper must compete with the streams"
    reported = sum(s.reported for s in run.samples)
    assert run.histogram_count == REQUESTS
    assert run.histogram_sum == pytest.approx(reported, abs=1e-6), "histogram vs responses"
    figures = {k: round(v, 2) for k, v in summary(run).items()}
    off = [abs(s.late) * 1e3 for s in run.samples]
    assert abs(figures["p50"]) <= P50_MS, f"wire - reported TTFT, ms: {figures}"
    assert percentile(off, 0.99) <= P99_MS, f"wire - reported TTFT, ms: {figures}"
    wire, reported = client_itl(run)
    assert wire == pytest.approx(reported, rel=ITL_REL), f"client ITL, ms: wire {wire}"


@pytest.mark.timeout(180)
def test_a_long_tokenizing_request_is_not_reported_faster_than_the_wire(tmp_path: Path) -> None:
    """30,000 tokens of text take the stand-in tokenizer ~20 ms, longer than the frontend
    latency the 1.7B profile models (12 ms): the arrival is stamped when the request reached
    the server, and the engine sees it no earlier than it really got it, so the reported TTFT
    covers all of it (stamped after tokenizing, it was ~20 ms short; with the engine seeing
    it at the modelled 12 ms, ~8 ms short)."""
    long = ("--max-model-len", "32768", "--kv-cache-memory-bytes", str(4 << 30),
            "--profile", "qwen3-1.7b-8gb")  # fmt: skip
    with sim_process(tmp_path / "sim.log", *long) as (host, port):
        run = measure(host, port, requests=3, concurrency=1, prompt_tokens=30_000,
                      max_tokens=2, scrape_interval=60)  # fmt: skip
    late = sorted(s.late * 1e3 for s in run.samples)
    assert abs(late[1]) <= LONG_REQUEST_MS, f"wire - reported TTFT, ms: {late}"


def test_the_metrics_template_renders_what_generate_latest_renders() -> None:
    """The fast ``/metrics`` render is byte for byte prometheus_client's, after traffic."""
    sim = build_engine(SimConfig(model=MODEL, max_model_len=4096, kv_cache_memory_bytes=1 << 30))
    registry, render = render_metrics(
        sim.core.stats, sim.core.gauges, model_name=MODEL, cache_info=sim.cache_config_info()
    )
    for i in range(12):
        sim.core.add_request(SimRequest(f"r{i}", list(range(i * 90, i * 90 + 700)), 9 + i,
                                        arrival_time=i * 0.003))  # fmt: skip
    while sim.core.step() is not None:
        pass
    assert b"vllm:time_to_first_token_seconds_count{" in render()
    assert render() == generate_latest(registry)
