"""Print what the simulator's calibrated profiles give next to what the articles measured.

Runs every scenario of ``shared/seeds/DIGEST.md`` in virtual time through the engine
core (no HTTP), so the numbers are exact and machine-independent:

    .venv/bin/python bench/sim_calibration.py
"""

from __future__ import annotations

import itertools
import random
import time

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.replay import run_closed_loop, summarize_replay

GIB = 1 << 30


def _engine(**kw):
    base = {"model": "Qwen/Qwen3-1.7B", "max_model_len": 4096, "max_num_seqs": 64}
    return build_engine(SimConfig(**(base | kw)))


def _prompts(rng: random.Random, n: int, length: int) -> list[list[int]]:
    return [[rng.randrange(1000, 150000) for _ in range(length)] for _ in range(n)]


def _sweep(conc: int, n: int, inp: int, out: int, seed: int = 0, **kw):
    sim = _engine(**kw)
    done = run_closed_loop(
        sim.core, _prompts(random.Random(seed), n, inp), concurrency=conc, max_tokens=out
    )
    return summarize_replay(done), sim


def _row(label: str, sim_value: str, article: str) -> None:
    print(f"  {label:<52} sim {sim_value:<22} article {article}")


def article_000() -> None:
    print("article 000 (profile qwen3-1.7b-8gb, Qwen3-1.7B, --max-model-len 4096)")
    sim = _engine()
    _row("GPU KV cache size (util 0.9)", f"{sim.capacity.num_tokens:,} tokens", "22,048 tokens")
    fp8 = _engine(kv_cache_dtype="fp8")
    _row("fp8 KV cache size", f"{fp8.capacity.num_tokens:,} tokens", "41,920 (other start)")
    results = {c: _sweep(c, max(4 * c, 16), 512, 128)[0] for c in (1, 8, 32, 64)}
    for c, s in results.items():
        _row(
            f"conc {c} 512/128: throughput, median TTFT",
            f"{s.output_throughput:.0f} tok/s {s.median_ttft * 1000:.0f} ms",
            {1: "66 tok/s", 8: "383 tok/s", 32: "831 tok/s, 666 ms", 64: "< 831, 5.7 s"}[c],
        )
    _row(
        "TTFT jump 32 -> 64",
        f"{results[64].median_ttft / results[32].median_ttft:.1f}x",
        "8.6x",
    )
    _row(
        "median ITL conc 1 / 32; p99 ITL conc 32",
        f"{results[1].median_itl * 1e3:.0f}/{results[32].median_itl * 1e3:.0f}/"
        f"{results[32].p99_itl * 1e3:.0f} ms",
        "15/25/~220 ms",
    )
    big = _sweep(64, 256, 512, 128, gpu_memory_utilization=0.9, kv_cache_memory_bytes=None,
                 gpu_memory_bytes=int(8 * GIB * 1.024))[0]  # fmt: skip
    _row("TTFT conc 64 with ~26.5k tokens of KV", f"{big.median_ttft:.2f} s", "2.1-2.2 s")
    s4, s16 = _sweep(4, 32, 2048, 128)[0], _sweep(16, 64, 2048, 128)[0]
    _row(
        "input 2048, conc 4 -> 16: throughput, TTFT",
        f"+{(s16.output_throughput / s4.output_throughput - 1) * 100:.0f}% "
        f"{s16.median_ttft / s4.median_ttft:.1f}x",
        "+37%, 5.4x",
    )
    p512 = _sweep(32, 64, 512, 128)[0]
    p2048 = _sweep(32, 64, 2048, 128)[0]
    p1500 = _sweep(64, 128, 1500, 256)[0]
    _row(
        "preemptions 512x32 / 2048x32 / 1500-256x64",
        f"{p512.num_preemptions}/{p2048.num_preemptions}/{p1500.num_preemptions}",
        "0 / 7 / 22",
    )
    _row(
        "median TTFT 2048x32 / 1500-256x64",
        f"{p2048.median_ttft:.1f}/{p1500.median_ttft:.1f} s",
        "12.5 / 35.4 s",
    )
    s16seq = _sweep(64, 256, 512, 128, max_num_seqs=16)[0]
    _row(
        "--max-num-seqs 16 at conc 64: throughput, TTFT",
        f"{(s16seq.output_throughput / results[64].output_throughput - 1) * 100:+.0f}% "
        f"{s16seq.median_ttft / results[64].median_ttft:.1f}x",
        "-23%, 1.8x",
    )
    hit, miss = prefix_ttft()
    _row("3,000-token shared prefix, TTFT miss / hit", f"{miss * 1e3:.0f}/{hit * 1e3:.0f} ms",
         "394/28 ms (14x)")  # fmt: skip
    gaps = chunk_gaps()
    _row(
        "longest ITL by max-num-batched-tokens",
        "/".join(f"{g * 1e3:.0f}" for g in gaps.values()) + " ms",
        "69/129/227/445/445 ms",
    )
    eager = _sweep(1, 4, 512, 128, enforce_eager=True)[0]
    _row("eager at conc 1", f"{eager.output_throughput:.0f} tok/s", "64 tok/s")
    small = {"model": "Qwen/Qwen3-0.6B", "profile": "qwen3-1.7b-8gb"}
    for eager in (False, True):
        one = _sweep(1, 4, 512, 128, enforce_eager=eager, **small)[0]
        many = _sweep(32, 96, 512, 128, enforce_eager=eager, **small)[0]
        _row(
            f"Qwen3-0.6B {'eager' if eager else 'graphs'}: conc 1 / conc 32",
            f"{one.output_throughput:.0f}/{many.output_throughput:.0f} tok/s",
            "108/1,503" if eager else "168/1,557",
        )


def prefix_ttft(model: str = "Qwen/Qwen3-1.7B", prefix: int = 3000, tail: int = 32):
    """Serial requests sharing a prefix, 1 output token: TTFT of the warm-up and a hit."""
    sim = _engine(model=model)
    rng = random.Random(1)
    shared = [rng.randrange(1000, 150000) for _ in range(prefix)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(tail)] for _ in range(4)]
    done = run_closed_loop(sim.core, prompts, concurrency=1, max_tokens=1)
    ttfts = [r.token_times[0] - r.arrival_time for r in done]
    return min(ttfts[1:]), ttfts[0]


def chunk_gaps() -> dict[int, float]:
    """One decoding request while three 3,500-token prompts arrive one after another."""
    from kvbench.sim.replay import run_open_loop

    out = {}
    for budget in (512, 1024, 2048, 4096, 8192):
        sim = _engine(max_num_batched_tokens=budget)
        rng = random.Random(2)
        arrivals = [(0.0, _prompts(rng, 1, 64)[0])]
        arrivals += [(1.0 + 1.5 * i, _prompts(rng, 1, 3500)[0]) for i in range(3)]
        requests = run_open_loop(sim.core, arrivals, max_tokens=400)
        times = requests[0].token_times
        out[budget] = max(b - a for a, b in itertools.pairwise(times))
    return out


def article_002() -> None:
    print("article 002 (profile qwen3-0.6b-24gb, Qwen3-0.6B, 1 GiB KV, --max-model-len 4096)")
    kw = {"model": "Qwen/Qwen3-0.6B", "kv_cache_memory_bytes": GIB, "gpu_memory_utilization": 0.01}
    sim = _engine(**kw)
    _row("GPU KV cache size", f"{sim.capacity.num_tokens:,} tokens ({sim.capacity.num_gpu_blocks} "
         "blocks)", "~9,362 tokens; 585 blocks")  # fmt: skip
    rng = random.Random(3)
    shared = [rng.randrange(1000, 150000) for _ in range(2032)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(339)] for _ in range(6)]
    done = run_closed_loop(_engine(**kw).core, prompts, concurrency=1, max_tokens=64)
    ttfts = [r.token_times[0] - r.arrival_time for r in done]
    _row("2,371-token prompt, TTFT miss / hit (conc 1)",
         f"{ttfts[0] * 1e3:.0f}/{min(ttfts[1:]) * 1e3:.0f} ms", "105-113 / ~40 ms")  # fmt: skip


if __name__ == "__main__":
    t0 = time.perf_counter()
    article_000()
    article_002()
    print(f"(ran in {time.perf_counter() - t0:.1f} s of wall time)")
