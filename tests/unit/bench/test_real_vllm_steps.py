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
