"""Where article 000's throughput fall from concurrency 32 to 64 comes from: real vLLM and
the simulator on exactly the same requests, compared in engine steps.

On a GPU machine (vLLM importable, models as in docs/simulator.md, "Against real vLLM"),
``--real OUT`` starts one `vllm serve` of Qwen3-1.7B (dummy weights, 22,048 KV tokens,
max-num-seqs 64, 2,048 batched tokens), runs closed loops of 4 x concurrency prompts of 512
random token ids (128 output tokens, two warm-up requests, a prefix-cache reset first) at
32 and 64, two trials each, and writes OUT/steps.json.gz: every prompt, every token's
arrival, and the whole /metrics page before and after each window.

Here, ``--compare FILE`` replays the same prompts on the simulator (``roofline:h200`` and
article 000's ``qwen3-1.7b-8gb``) and prints, per run, the engine steps
(``vllm:iteration_tokens_total`` observations on the real side), preemptions, the prefix
cache's queries and hits (counted at every lookup, as vLLM 0.25 does), the duration and
the time per step. The client here opens one connection per request from one Python
process; its throughput is lower than `kvbench loadgen`'s, but the step counts do not
depend on the client.

    python bench/real_vllm_steps.py --real OUT --model-dir /tmp/models
    .venv/bin/python bench/real_vllm_steps.py --compare OUT/steps.json.gz
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

MODEL = "Qwen/Qwen3-1.7B"
KV_BYTES = 2_528_641_024  # 22,048 tokens of Qwen3-1.7B's KV
ENGINE = {"max_model_len": 4096, "max_num_seqs": 64, "max_num_batched_tokens": 2048}
PROMPT, OUTPUT, WARMUP = 512, 128, 2
CONCURRENCIES, TRIALS = (32, 64), (1, 2)
PORT = 8011
URL = f"http://127.0.0.1:{PORT}"


def _prompts(rng: random.Random, count: int) -> list[list[int]]:
    return [[rng.randrange(1000, 150_000) for _ in range(PROMPT)] for _ in range(count)]


async def _request(client: httpx.AsyncClient, prompt: list[int]) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": OUTPUT, "ignore_eos": True,
            "stream": True}  # fmt: skip
    record: dict = {"sent": time.monotonic(), "tokens": []}
    async with client.stream("POST", URL + "/v1/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                record["tokens"].append(time.monotonic())
    return record


async def _closed_loop(prompts: list[list[int]], concurrency: int) -> list[dict]:
    """`concurrency` clients, each sending the next prompt when its last one ends, on a new
    connection per request."""
    records: list[dict] = [{} for _ in prompts]
    queue = list(range(len(prompts)))
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits) as client:

        async def client_loop() -> None:
            while queue:
                i = queue.pop(0)
                records[i] = await _request(client, prompts[i])

        await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    return records


def _serve(model_dir: Path, log: Path, extra: list[str]) -> subprocess.Popen:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in ENGINE.items()]
    command = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir / "Qwen3-1.7B"),
        "--served-model-name", MODEL, "--load-format", "dummy", "--host", "127.0.0.1",
        "--port", str(PORT), f"--kv-cache-memory-bytes={KV_BYTES}", *flags, *extra,
    ]  # fmt: skip
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def run_real(out: Path, model_dir: Path, extra: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    server = _serve(model_dir, out / "vllm.log", extra)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(URL + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"vllm serve did not come up: see {out / 'vllm.log'}")
            time.sleep(1)
        runs = []
        for concurrency in CONCURRENCIES:
            for trial in TRIALS:
                rng = random.Random(1000 * concurrency + trial)
                prompts = _prompts(rng, 4 * concurrency)
                httpx.post(URL + "/reset_prefix_cache", timeout=30).raise_for_status()
                asyncio.run(_closed_loop(_prompts(rng, WARMUP), WARMUP))
                before = httpx.get(URL + "/metrics", timeout=10).text
                began = time.monotonic()
                records = asyncio.run(_closed_loop(prompts, concurrency))
                ended = time.monotonic()
                after = httpx.get(URL + "/metrics", timeout=10).text
                runs.append({"concurrency": concurrency, "trial": trial, "prompts": prompts,
                             "requests": records, "began": began, "ended": ended,
                             "before": before, "after": after})  # fmt: skip
                tokens = sum(len(r["tokens"]) for r in records)
                print(f"c{concurrency} t{trial}: {tokens / (ended - began):,.0f} tok/s", flush=True)
        with gzip.open(out / "steps.json.gz", "wt") as f:
            json.dump(runs, f)
    finally:
        server.terminate()
        server.wait(60)


def _counters(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def _real_row(run: dict) -> dict[str, float]:
    before, after = _counters(run["before"]), _counters(run["after"])

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    return {
        "steps": delta("vllm:iteration_tokens_total_count"),
        "preemptions": delta("vllm:num_preemptions_total"),
        "queries": delta("vllm:prefix_cache_queries_total"),
        "hits": delta("vllm:prefix_cache_hits_total"),
        "seconds": run["ended"] - run["began"],
        "tokens": sum(len(r["tokens"]) for r in run["requests"]),
    }


Step = tuple[float, int, int]
"""One engine step: (seconds, scheduled tokens, scheduled requests)."""


def _simulate(run: dict, profile: str) -> tuple[dict[str, float], list[Step]]:
    """The run's prompts on the simulator: its row, and every step of the window."""
    from kvbench.sim import SimConfig, build_engine
    from kvbench.sim.engine import StepResult
    from kvbench.sim.replay import run_closed_loop

    config = SimConfig(
        model=MODEL, kv_cache_memory_bytes=KV_BYTES, gpu_memory_utilization=0.1,
        profile=profile, prefix_cache_stats_at="lookup", **ENGINE,
    )  # fmt: skip
    core = build_engine(config).core
    run_closed_loop(core, [[7] * PROMPT, [8] * PROMPT], concurrency=WARMUP, max_tokens=OUTPUT)
    queries, hits = core.kv.stats.queries, core.kv.stats.hits
    preemptions, began = core.scheduler.num_preemptions, core.clock
    steps: list[Step] = []
    step = core.step

    def counted_step() -> StepResult | None:
        result = step()
        if result is not None and result.num_tokens > 0:
            steps.append((result.end - result.start, result.num_tokens, result.num_requests))
        return result

    core.step = counted_step  # type: ignore[method-assign]
    done = run_closed_loop(core, run["prompts"], concurrency=run["concurrency"], max_tokens=OUTPUT)
    row = {
        "steps": len(steps),
        "preemptions": core.scheduler.num_preemptions - preemptions,
        "queries": core.kv.stats.queries - queries,
        "hits": core.kv.stats.hits - hits,
        "seconds": max(r.finish_time for r in done) - began,
        "tokens": sum(r.num_output_tokens for r in done),
    }
    return row, steps


def _traced_steps(run: dict, trace: list[list[float]]) -> list[Step]:
    """The real steps of the run's window from the plugin's trace: the time between two
    `update_from_output` calls is the later step's."""
    inside = [t for t in trace if run["began"] <= t[0] <= run["ended"]]
    return [(b[0] - a[0], int(b[1]), int(b[2])) for a, b in itertools.pairwise(inside)]


def _kinds(steps: list[Step]) -> dict[str, list[Step]]:
    kinds: dict[str, list[Step]] = {"decode": [], "mixed": [], "full chunk": []}
    budget = ENGINE["max_num_batched_tokens"]
    for step in steps:
        _, tokens, requests = step
        kind = (
            "decode" if tokens == requests else "full chunk" if tokens >= budget - 48 else "mixed"
        )
        kinds[kind].append(step)
    return kinds


def _print_kinds(name: str, side: str, steps: list[Step]) -> None:
    kinds = _kinds(steps)
    decode_median = statistics.median(s[0] for s in kinds["decode"])
    for kind, group in kinds.items():
        if not group:
            continue
        times = [s[0] for s in group]
        stalls = sum(1 for t in times if t > 5 * decode_median) if kind == "decode" else 0
        print(f"{name:<8} {side:<18} {kind:<10} {len(group):>5} "
              f"{1000 * statistics.median(times):>7.2f} {1000 * statistics.mean(times):>7.2f} "
              f"{statistics.mean(s[2] for s in group):>6.1f} {sum(times):>7.2f} "
              f"{stalls if kind == 'decode' else '':>6}")  # fmt: skip


CAUSES = ("schedule ms", "gc ms", "gen2 gcs", "preempted", "admitted")
"""The step-trace plugin's columns 6-10: where a step's time went (kvbench_steptrace.py)."""


def _print_stall_causes(name: str, run: dict, trace: list[list[float]]) -> None:
    """Decode steps over 5 x the median decode step against the other decode steps: the
    mean of each of the plugin's cause columns, and how many steps had any of it."""
    inside = [t for t in trace if run["began"] <= t[0] <= run["ended"] and len(t) > 10]
    decodes = [(b[0] - a[0], b) for a, b in itertools.pairwise(inside) if b[1] == b[2]]
    if not decodes:
        return
    median = statistics.median(d for d, _ in decodes)
    groups = {
        "stalled": [row for d, row in decodes if d > 5 * median],
        "other": [row for d, row in decodes if d <= 5 * median],
    }
    for label, rows in groups.items():
        if not rows:
            continue
        means = " ".join(
            f"{statistics.mean(r[6 + i] for r in rows):>8.2f}"
            f"/{sum(1 for r in rows if r[6 + i] > 0):<4}"
            for i in range(len(CAUSES))
        )
        print(f"{name:<8} {label:<8} {len(rows):>5} {means}")


def _print_uncaptured(name: str, run: dict, trace: list[list[float]], capture: int) -> None:
    """Steps above the CUDA-graph capture size, and the decode steps right before them (where
    async scheduling shows the host's launch of the next step) against all decode steps."""
    steps = _traced_steps(run, trace)
    decode = [s for s, tokens, requests in steps if tokens == requests]
    over = [s for s, tokens, _ in steps if tokens > capture]
    before = [
        steps[i - 1][0]
        for i in range(1, len(steps))
        if steps[i][1] > capture and steps[i - 1][1] == steps[i - 1][2]
    ]
    print(
        f"{name:<8} {1000 * statistics.median(decode):>8.2f} {len(over):>6} "
        f"{1000 * statistics.mean(over) if over else 0:>8.1f} {len(before):>6} "
        f"{1000 * statistics.mean(before) if before else 0:>8.1f}"
    )


def compare(path: Path, trace_path: Path | None = None, capture: int = 128) -> None:
    with gzip.open(path, "rt") as f:
        runs = json.load(f)
    print(f"{'run':<8} {'side':<18} {'steps':>6} {'preempt':>7} {'queries':>8} {'hits':>5} "
          f"{'seconds':>8} {'ms/step':>8} {'tok/s':>7}")  # fmt: skip
    simulated: dict[tuple[str, str], list[Step]] = {}
    for run in runs:
        name = f"c{run['concurrency']}.t{run['trial']}"
        rows = {"real vLLM": _real_row(run)}
        for profile in ("roofline:h200", "qwen3-1.7b-8gb"):
            rows[f"sim {profile}"], simulated[(name, profile)] = _simulate(run, profile)
        for side, r in rows.items():
            print(f"{name:<8} {side:<18} {r['steps']:>6.0f} {r['preemptions']:>7.0f} "
                  f"{r['queries']:>8.0f} {r['hits']:>5.0f} {r['seconds']:>8.2f} "
                  f"{1000 * r['seconds'] / r['steps']:>8.2f} "
                  f"{r['tokens'] / r['seconds']:>7,.0f}")  # fmt: skip
    if trace_path is None:
        return
    trace = [[float(x) for x in line.split("\t")] for line in trace_path.read_text().splitlines()]
    print(f"\nsteps by kind (stalls: decode steps over 5 x the median decode step)\n"
          f"{'run':<8} {'side':<18} {'kind':<10} {'steps':>5} {'p50 ms':>7} {'mean ms':>7} "
          f"{'reqs':>6} {'total s':>7} {'stalls':>6}")  # fmt: skip
    for run in runs:
        name = f"c{run['concurrency']}.t{run['trial']}"
        _print_kinds(name, "real vLLM (traced)", _traced_steps(run, trace))
        _print_kinds(name, "sim roofline:h200", simulated[(name, "roofline:h200")])
    print(
        f"\nsteps above the CUDA-graph capture size ({capture} tokens), and the decode steps "
        f"right before them\n{'run':<8} {'decode':>8} {'over':>6} {'mean ms':>8} "
        f"{'before':>6} {'mean ms':>8}"
    )
    for run in runs:
        name = f"c{run['concurrency']}.t{run['trial']}"
        _print_uncaptured(name, run, trace, capture)
    if not any(len(t) > 10 for t in trace):
        return
    print(
        f"\nwhere decode steps' time went (mean / steps with any), real vLLM (traced)\n"
        f"{'run':<8} {'steps':<8} {'count':>5} " + " ".join(f"{c:>13}" for c in CAUSES)
    )
    for run in runs:
        _print_stall_causes(f"c{run['concurrency']}.t{run['trial']}", run, trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--real", type=Path, metavar="OUT", help="run real vLLM, write OUT/")
    side.add_argument("--compare", type=Path, metavar="FILE", help="steps.json.gz to replay")
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/models"))
    parser.add_argument(
        "--vllm-arg", action="append", default=[], metavar="ARG",
        help="with --real: one more argument for `vllm serve` (repeat the flag for more)",
    )  # fmt: skip
    parser.add_argument(
        "--trace", type=Path, metavar="TSV",
        help="with --compare: the steptrace plugin's file of the same server, for steps by kind",
    )  # fmt: skip
    parser.add_argument(
        "--capture-size", type=int, default=128, metavar="TOKENS",
        help="with --trace: the server's largest CUDA graph (vLLM's default here: 2 x 64)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.real:
        run_real(args.real, args.model_dir, args.vllm_arg)
    else:
        compare(args.compare, args.trace, args.capture_size)


if __name__ == "__main__":
    main()
