"""bench/real_vllm_steps.py --compare: the real side's figures are the deltas of the /metrics
pages around the window, and the simulator replays the file's own prompts."""

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench" / "real_vllm_steps.py"


def _page(steps: int, preemptions: int, queries: int, hits: int) -> str:
    return (
        "# TYPE vllm:iteration_tokens_total histogram\n"
        f'vllm:iteration_tokens_total_bucket{{le="+Inf"}} {steps}\n'
        f"vllm:iteration_tokens_total_count {steps}\nvllm:iteration_tokens_total_sum 1\n"
        f"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total {preemptions}\n"
        f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total {queries}\n"
        f"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total {hits}\n"
    )


def test_compare_reads_metric_deltas_and_replays_the_prompts(tmp_path: Path) -> None:
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 150_000) for _ in range(512)] for _ in range(3)]
    prompts.append(list(prompts[0]))  # sent after the first finished: a prefix-cache hit
    run = {
        "concurrency": 2, "trial": 1, "prompts": prompts, "began": 10.0, "ended": 12.0,
        "requests": [{"sent": 10.0, "tokens": [11.0] * 128} for _ in prompts],
        "before": _page(steps=40, preemptions=3, queries=900, hits=100),
        "after": _page(steps=140, preemptions=5, queries=2948, hits=596),
    }  # fmt: skip
    path = tmp_path / "steps.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump([run], f)
    out = subprocess.run(
        [sys.executable, str(BENCH), "--compare", str(path)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    rows = {" ".join(f[1:3]): f[3:] for f in (line.split() for line in out.splitlines()[1:])}
    assert rows["real vLLM"] == ["100", "2", "2048", "496", "2.00", "20.00", "256"]
    for side in ("sim roofline:h200", "sim qwen3-1.7b-8gb"):
        steps, preemptions, queries, hits, seconds, _, tok_s = rows[side]
        assert (preemptions, queries, hits) == ("0", "2048", "496"), side
        assert int(steps) >= 128 and float(seconds) > 0
        assert int(tok_s.replace(",", "")) == pytest.approx(512 / float(seconds), rel=0.01)


def test_trace_steps_by_kind_count_stalled_decode_steps(tmp_path: Path) -> None:
    """The plugin's trace, cut to the window: a step's time is the gap before its line; a
    decode step over 5 x the median decode step is a stall."""
    prompts = [[1000 + i] * 512 for i in range(2)]
    run = {
        "concurrency": 2, "trial": 1, "prompts": prompts, "began": 100.0, "ended": 101.0,
        "requests": [{"sent": 100.0, "tokens": [100.5] * 128} for _ in prompts],
        "before": _page(0, 0, 0, 0), "after": _page(13, 0, 1024, 0),
    }  # fmt: skip
    gaps = [0.003] * 10 + [0.030] + [0.020, 0.020]
    kinds = [(2, 2)] * 11 + [(2048, 2)] * 2
    times = [99.0, 100.1]  # the first line is before the window
    for gap in gaps:
        times.append(times[-1] + gap)
    lines = [f"{times[0]}\t2\t2\t2\t0\t0"] + [
        f"{t:.6f}\t{tok}\t{reqs}\t0\t0\t0"
        for t, (tok, reqs) in zip(times[1:], [(2, 2), *kinds], strict=True)
    ]
    trace = tmp_path / "steptrace-1.tsv"
    trace.write_text("\n".join(lines) + "\n")
    path = tmp_path / "steps.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump([run], f)
    out = subprocess.run(
        [sys.executable, str(BENCH), "--compare", str(path), "--trace", str(trace)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    real = [line.split() for line in out.splitlines() if "(traced)" in line]
    assert [f[4] for f in real] == ["decode", "full"]
    decode, full = real
    assert decode[5:] == ["11", "3.00", "5.45", "2.0", "0.06", "1"]
    assert full[6:] == ["2", "20.00", "20.00", "2.0", "0.04"]
