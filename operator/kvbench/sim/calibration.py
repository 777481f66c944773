"""The scenarios of the articles' figures (``figures.yaml``), run in virtual time.

Every scenario drives the engine core with virtual clients (no HTTP, no wall clock), so a
figure is exact and the same on any machine. ``simulate()`` returns the simulator's value of
every figure in the table, keyed by figure id; the tests and ``bench/sim_calibration.py``
compare them with the published values.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from kvbench.sim.config import SimConfig
from kvbench.sim.factory import SimEngine, build_engine
from kvbench.sim.replay import ReplaySummary, run_closed_loop, run_open_loop, summarize_replay

__all__ = ["SCENARIOS", "simulate"]

_KV_BYTES_PER_TOKEN = 114_688
"""Qwen3-1.7B / 0.6B in bf16: 2 x 28 layers x 8 KV heads x 128 x 2 bytes."""


def _engine(**kw: object) -> SimEngine:
    base: dict[str, object] = {
        "model": "Qwen/Qwen3-1.7B",
        "max_model_len": 4096,
        "max_num_seqs": 64,
    }
    return build_engine(SimConfig(**(base | kw)))  # type: ignore[arg-type]


def _kv_tokens(tokens: int) -> dict[str, object]:
    """A server start with exactly ``tokens`` KV tokens (the articles saw 22,048-27,504)."""
    return {"kv_cache_memory_bytes": tokens * _KV_BYTES_PER_TOKEN, "gpu_memory_utilization": 0.1}


def _prompts(seed: int, n: int, length: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, 150000) for _ in range(length)] for _ in range(n)]


def _closed(conc: int, n: int, inp: int, out: int, **kw: object) -> ReplaySummary:
    sim = _engine(**kw)
    done = run_closed_loop(sim.core, _prompts(conc, n, inp), concurrency=conc, max_tokens=out)
    return summarize_replay(done)


def _sweep(conc: int, **kw: object) -> ReplaySummary:
    """The 512/128 sweep: 4 x concurrency requests (at least 16)."""
    return _closed(conc, max(4 * conc, 16), 512, 128, **kw)


def concurrency_sweep() -> dict[str, float]:
    s = {c: _sweep(c) for c in (1, 8, 32, 64)}
    big = _sweep(64, **_kv_tokens(26_560))
    return {
        "a000.kv-tokens": _engine().capacity.num_tokens,
        "a000.c1.throughput": s[1].output_throughput,
        "a000.c1.itl-median": s[1].median_itl,
        "a000.c8.throughput": s[8].output_throughput,
        "a000.c8.ttft-median": s[8].median_ttft,
        "a000.c32.throughput": s[32].output_throughput,
        "a000.c32.ttft-median": s[32].median_ttft,
        "a000.c32.ttft-p95": s[32].p95_ttft,
        "a000.c32.itl-median": s[32].median_itl,
        "a000.c32.itl-p99": s[32].p99_itl,
        "a000.c64.throughput-vs-c32": s[64].output_throughput / s[32].output_throughput,
        "a000.c64.ttft-median": s[64].median_ttft,
        "a000.c64.ttft-vs-c32": s[64].median_ttft / s[32].median_ttft,
        "a000.c64-kv26560.throughput": big.output_throughput,
        "a000.c64-kv26560.ttft-median": big.median_ttft,
        "a000.c64.ttft-kv22048-vs-kv26560": s[64].median_ttft / big.median_ttft,
        **_max_num_seqs(s[64]),
    }


def _max_num_seqs(full: ReplaySummary) -> dict[str, float]:
    capped = _sweep(64, max_num_seqs=16)
    return {
        "a000.seqs16.throughput-vs-seqs64": capped.output_throughput / full.output_throughput,
        "a000.seqs16.ttft-vs-seqs64": capped.median_ttft / full.median_ttft,
    }


def long_inputs() -> dict[str, float]:
    c4, c16 = _closed(4, 32, 2048, 128), _closed(16, 64, 2048, 128)
    return {
        "a000.in2048.throughput-c16-vs-c4": c16.output_throughput / c4.output_throughput,
        "a000.in2048.ttft-c16-vs-c4": c16.median_ttft / c4.median_ttft,
    }


def preemptions() -> dict[str, float]:
    """The article's preemption runs: 2 x concurrency requests each."""
    p512, p2048 = _closed(32, 64, 512, 128), _closed(32, 64, 2048, 128)
    p1500 = _closed(64, 128, 1500, 256)
    return {
        "a000.preempt.512x32": p512.num_preemptions,
        "a000.preempt.2048x32": p2048.num_preemptions,
        "a000.preempt.1500x64": p1500.num_preemptions,
        "a000.preempt.2048x32.ttft-median": p2048.median_ttft,
        "a000.preempt.1500x64.ttft-median": p1500.median_ttft,
    }


def _prefix_ttfts(**kw: object) -> list[float]:
    """Serial requests sharing a 3,000-token prefix, 1 output token each."""
    rng = random.Random(1)
    shared = [rng.randrange(1000, 150000) for _ in range(3000)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(32)] for _ in range(4)]
    done = run_closed_loop(_engine(**kw).core, prompts, concurrency=1, max_tokens=1)
    return [r.token_times[0] - r.arrival_time for r in done]


def prefix_cache() -> dict[str, float]:
    on = _prefix_ttfts()
    heavy = _closed(32, 96, 2048, 16)
    return {
        "a000.prefix.miss-ttft": on[0],
        "a000.prefix.hit-ttft": max(on[1:]),
        "a000.prefix.off-ttft": max(_prefix_ttfts(enable_prefix_caching=False)),
        "a000.prefill-heavy.throughput": heavy.output_throughput,
        "a000.prefill-heavy.ttft-median": heavy.median_ttft,
    }


def chunked_prefill() -> dict[str, float]:
    """One decoding request while three 3,500-token prompts arrive 1.5 s apart."""
    out: dict[str, float] = {}
    for budget in (512, 1024, 2048, 4096, 8192):
        arrivals = [(0.0, _prompts(7, 1, 64)[0])]
        arrivals += [(1.0 + 1.5 * i, p) for i, p in enumerate(_prompts(8, 3, 3500))]
        requests = run_open_loop(
            _engine(max_num_batched_tokens=budget).core, arrivals, max_tokens=400
        )
        times = requests[0].token_times
        out[f"a000.chunk{budget}.max-itl"] = max(b - a for a, b in itertools.pairwise(times))
        if budget in (512, 8192):
            out[f"a000.chunk{budget}.long-ttft"] = (
                requests[1].token_times[0] - requests[1].arrival_time
            )
    return out


def cuda_graphs() -> dict[str, float]:
    small = {"model": "Qwen/Qwen3-0.6B", "profile": "qwen3-1.7b-8gb"}
    return {
        "a000.eager.c1.throughput": _closed(1, 4, 512, 128, enforce_eager=True).output_throughput,
        "a000.small.c1.throughput": _closed(1, 4, 512, 128, **small).output_throughput,
        "a000.small.c32.throughput": _closed(32, 96, 512, 128, **small).output_throughput,
        "a000.small-eager.c1.throughput": _closed(
            1, 4, 512, 128, enforce_eager=True, **small
        ).output_throughput,
        "a000.small-eager.c32.throughput": _closed(
            32, 96, 512, 128, enforce_eager=True, **small
        ).output_throughput,
    }


def _one_at_a_time(**kw: object) -> tuple[SimEngine, list[float]]:
    """Article 002's request shape on one Qwen3-0.6B worker, one at a time: the TTFTs of a
    miss, then of four hits."""
    base = {"model": "Qwen/Qwen3-0.6B", "kv_cache_memory_bytes": 1 << 30}
    sim = _engine(**(base | kw), gpu_memory_utilization=0.01)
    rng = random.Random(3)
    shared = [rng.randrange(1000, 150000) for _ in range(2032)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(339)] for _ in range(5)]
    done = run_closed_loop(sim.core, prompts, concurrency=1, max_tokens=64)
    return sim, [r.token_times[0] - r.arrival_time for r in done]


def article_002() -> dict[str, float]:
    """One Qwen3-0.6B worker of article 002, its requests one at a time."""
    sim, ttfts = _one_at_a_time()
    return {
        "a002.kv-tokens": sim.capacity.num_tokens,
        "a002.miss-ttft": ttfts[0],
        "a002.hit-ttft": max(ttfts[1:]),
    }


def h200() -> dict[str, float]:
    """The same on real vLLM's H200 profile (bench/results/real-vllm-h200-one-at-a-time)."""
    _, ttfts = _one_at_a_time(profile="qwen3-0.6b-h200")
    return {"h200.miss-ttft": ttfts[0], "h200.hit-ttft": max(ttfts[1:])}


SCENARIOS: tuple[Callable[[], dict[str, float]], ...] = (
    concurrency_sweep,
    long_inputs,
    preemptions,
    prefix_cache,
    chunked_prefill,
    cuda_graphs,
    article_002,
    h200,
)


def simulate() -> dict[str, float]:
    """The simulator's value of every figure, by id."""
    values: dict[str, float] = {}
    for scenario in SCENARIOS:
        values |= scenario()
    return values
