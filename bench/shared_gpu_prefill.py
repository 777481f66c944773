"""A long prefill on a GPU that other workers are decoding on: how much it slows, real vLLM
against the simulator, and what one decode step of theirs costs meanwhile.

N workers of one experiment file share GPU 0 (real: `vllm serve`, as `kvbench run --engine
vllm --gpus 0` starts them; sim: `kvbench sim` with one `--shared-gpu` file, at a time scale
slow enough that this machine keeps up). Worker 0 is the probe: it gets one request at a time,
a prompt of L fresh random token ids (a miss) and two output tokens. Workers 1..m decode a
cached 256-token prompt with 64 output tokens, d requests in flight each, the whole time. For
every (m, d, L) the probe's TTFT and the decoders' inter-token gaps are kept: the real ones as
the client sees them, the simulated ones as the simulator reports them. `--router` adds the
hop of vllm-router (cache_aware) in front of worker 0 alone: one request at a time, the same
prompt, through the router and directly. `--together KxR,...` measures long prefills started
together instead: K workers get R fresh misses of L tokens each at the same moment, nothing else
running (the warm-up of a router arm: which worker frees first decides where new prefixes go);
every round's TTFTs are kept, in the order of the workers.

    # on the GPU machine (after `source .dev/device.sh`):
    python bench/shared_gpu_prefill.py run --engine vllm FILE OUT.json --model-dir /tmp/models
    # here:
    .venv/bin/python bench/shared_gpu_prefill.py run --engine sim FILE OUT.json
    .venv/bin/python bench/shared_gpu_prefill.py compare REAL.json SIM.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from kvbench.api import load_experiment
from kvbench.procs import free_port
from kvbench.runner.cluster.local.arms import router_binary
from kvbench.runner.cluster.local.launcher import WorkerSlot
from kvbench.runner.cluster.local.vllm_workers import VllmLauncher, VllmOptions
from kvbench.runner.cluster.local.workers import sim_command

DECODE_PROMPT = 256
DECODE_OUTPUT = 64
PROBES = 10


def _start(args: argparse.Namespace, share: Path) -> tuple[list[subprocess.Popen], list[str]]:
    experiment = load_experiment(args.experiment)
    spec = experiment.spec
    pool = spec.workers[0]
    engine = spec.engine
    procs, urls = [], []
    launcher = None
    if args.engine == "vllm":
        options = VllmOptions(
            model_dir=args.model_dir, gpus=["0"], extra_args=["--load-format=dummy"]
        )
        launcher = VllmLauncher(options)
    for i in range(args.workers):
        host, port = f"127.0.{40 + i}.1", free_port("127.0.0.1")
        if launcher is not None:
            slot = WorkerSlot(pool=pool, name=f"w{i}", ordinal=i, seed=i)
            proc = launcher.process(spec, engine, slot, host, port)
            argv, env = proc.argv, proc.env
        else:
            spec = spec.model_copy(
                update={"simulator": spec.simulator.model_copy(update={"time_scale": args.scale})}
            )
            argv = sim_command(spec, engine, pool, f"w{i}", host, port, i, (str(share), i))
            env = dict(os.environ)
        log = open(Path(args.out).with_suffix(f".w{i}.log"), "w")  # noqa: SIM115
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
        urls.append(f"http://{host}:{port}")
    return procs, urls


async def _ready(urls: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        for url in urls:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/health", timeout=2)).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} never served")
                await asyncio.sleep(1)


async def _request(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], max_tokens: int
) -> dict[str, Any]:
    """One streamed completion: the client's first-token time and gaps, the server's timings
    where it reports them (the simulator's `kvbench` extension)."""
    body = {
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
        "stream": True, "temperature": 0,
    }  # fmt: skip
    start = time.monotonic()
    times: list[float] = []
    ext = None
    async with client.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("kvbench"):
                ext = chunk["kvbench"]
            if any(c.get("text") for c in chunk.get("choices") or []):
                times.append(time.monotonic())
    out: dict[str, Any] = {
        "ttft": times[0] - start if times else None,
        "itl": [b - a for a, b in itertools.pairwise(times)],
    }
    if ext is not None:
        out["sim_ttft"] = ext["first_token_time"] - ext["arrival_time"]
        tt = ext["token_times"]
        out["sim_itl"] = [b - a for a, b in itertools.pairwise(tt)]
    return out


async def _decoder(url: str, model: str, prompt: list[int], gaps: list[float], stop: asyncio.Event):
    async with httpx.AsyncClient() as client:
        while not stop.is_set():
            r = await _request(client, url, model, prompt, DECODE_OUTPUT)
            gaps.extend(r.get("sim_itl", r["itl"]))


async def _condition(
    urls: list[str], model: str, m: int, d: int, length: int, rng: random.Random, warm: float
) -> dict[str, Any]:
    stop = asyncio.Event()
    gaps: list[float] = []
    prompt = [rng.randrange(1000, 100_000) for _ in range(DECODE_PROMPT)]
    decoders = [
        asyncio.create_task(_decoder(urls[1 + w], model, prompt, gaps, stop))
        for w in range(m)
        for _ in range(d)
    ]
    await asyncio.sleep(warm)
    del gaps[:]
    ttfts = []
    async with httpx.AsyncClient() as client:
        for _ in range(PROBES):
            probe = [rng.randrange(1000, 100_000) for _ in range(length)]
            r = await _request(client, urls[0], model, probe, 2)
            ttfts.append(r.get("sim_ttft", r["ttft"]))
    window = list(gaps)
    stop.set()
    await asyncio.gather(*decoders)
    return {
        "busy": m, "per_worker": d, "prompt": length,
        "ttft_p50": statistics.median(ttfts), "ttfts": ttfts,
        "decode_itl_p50": statistics.median(window) if window else None,
    }  # fmt: skip


async def _together(
    urls: list[str], model: str, workers: int, per: int, length: int, rng: random.Random
) -> dict[str, Any]:
    rounds = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as client:
        for _ in range(PROBES):
            prompts = [
                [rng.randrange(1000, 100_000) for _ in range(length)]
                for _ in range(workers * per)
            ]
            found = await asyncio.gather(*(
                _request(client, urls[i // per], model, prompt, 2)
                for i, prompt in enumerate(prompts)
            ))  # fmt: skip
            rounds.append([r.get("sim_ttft", r["ttft"]) for r in found])
    firsts = sorted(
        statistics.median(col) for col in zip(*[sorted(r) for r in rounds], strict=True)
    )
    return {"together": workers, "per_worker": per, "prompt": length,
            "ttft_ranked_p50": firsts, "rounds": rounds}  # fmt: skip


def _compare_together(real: dict[str, Any], sim: dict[str, Any]) -> None:
    key = lambda c: (c["prompt"], c["together"], c["per_worker"])  # noqa: E731
    sims = {key(c): c for c in sim.get("together", [])}
    print("prompt workers x each | TTFT ms, p50 of each rank (first to last), real / sim")
    for c in real.get("together", []):
        s = sims.get(key(c))
        if s is None:
            continue
        ranked = zip(c["ttft_ranked_p50"], s["ttft_ranked_p50"], strict=True)
        pairs = " ".join(f"{1000 * a:.0f}/{1000 * b:.0f}" for a, b in ranked)
        print(f"{c['prompt']:6} {c['together']:3} x {c['per_worker']} | {pairs}")


async def _router_hop(args: argparse.Namespace, urls: list[str], model: str) -> dict[str, Any]:
    """TTFT of one request at a time, the same cached prompt, through vllm-router
    (cache_aware over worker 0 alone) and straight to worker 0; a new connection each."""
    port = free_port("127.0.0.1")
    argv = [
        router_binary(), "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port("127.0.0.1")),
        "--worker-urls", urls[0],
    ]  # fmt: skip
    log = open(Path(args.out).with_suffix(".router.log"), "w")  # noqa: SIM115
    router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        await _ready([f"http://127.0.0.1:{port}"], 60)
        prompt = [random.Random(7).randrange(1000, 100_000) for _ in range(2371)]
        found: dict[str, list[float]] = {"router": [], "direct": []}
        for _ in range(20):
            for name, url in (("router", f"http://127.0.0.1:{port}"), ("direct", urls[0])):
                async with httpx.AsyncClient() as client:
                    found[name].append((await _request(client, url, model, prompt, 2))["ttft"])
        return found
    finally:
        router.terminate()
        router.wait(10)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    share = Path(tempfile.mkdtemp()) / "gpu0.share"
    procs, urls = _start(args, share)
    try:
        await _ready(urls, args.ready_timeout)
        model = load_experiment(args.experiment).spec.engine.model
        rng = random.Random(2323)
        warm = 0.5 * (args.scale if args.engine == "sim" else 1.0)
        results, together = [], []
        busy = [int(m) for m in args.busy.split(",") if int(m) < args.workers]
        for length in [int(v) for v in args.lengths.split(",")]:
            for layout in args.together.split(",") if args.together else []:
                k, per = (int(v) for v in layout.split("x"))
                result = await _together(urls, model, min(k, args.workers), per, length, rng)
                print(json.dumps({k: v for k, v in result.items() if k != "rounds"}), flush=True)
                together.append(result)
            for m in [] if args.together else busy:
                for d in [int(v) for v in args.per_worker.split(",")] if m else [0]:
                    result = await _condition(urls, model, m, d, length, rng, warm)
                    print(json.dumps({k: v for k, v in result.items() if k != "ttfts"}),
                          flush=True)  # fmt: skip
                    results.append(result)
        hop = await _router_hop(args, urls, model) if args.router else None
        return {"engine": args.engine, "workers": args.workers, "scale": args.scale,
                "conditions": results, "together": together, "router_hop": hop}  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(20)


def _compare(real_path: Path, sim_path: Path) -> None:
    real, sim = json.loads(real_path.read_text()), json.loads(sim_path.read_text())
    if real.get("together"):
        _compare_together(real, sim)
    if not real["conditions"]:
        return
    key = lambda c: (c["prompt"], c["busy"], c["per_worker"])  # noqa: E731
    sims = {key(c): c for c in sim["conditions"]}
    alone = {c["prompt"]: c["ttft_p50"] for c in real["conditions"] if c["busy"] == 0}
    print("prompt busy d | probe TTFT p50 ms real / sim (err) | x alone real / sim | "
          "decode gap p50 ms real / sim")  # fmt: skip
    for c in real["conditions"]:
        s = sims.get(key(c))
        if s is None:
            continue
        err = (s["ttft_p50"] - c["ttft_p50"]) / c["ttft_p50"]
        salone = next(x["ttft_p50"] for x in sim["conditions"] if x["prompt"] == c["prompt"]
                      and x["busy"] == 0)  # fmt: skip
        gaps = "-"
        if c["decode_itl_p50"] and s["decode_itl_p50"]:
            gaps = f"{1000 * c['decode_itl_p50']:.1f} / {1000 * s['decode_itl_p50']:.1f}"
        print(f"{c['prompt']:6} {c['busy']:4} {c['per_worker']:2} | "
              f"{1000 * c['ttft_p50']:6.1f} / {1000 * s['ttft_p50']:6.1f} ({100 * err:+4.0f}%) | "
              f"{c['ttft_p50'] / alone[c['prompt']]:4.2f} / {s['ttft_p50'] / salone:4.2f} | "
              f"{gaps}")  # fmt: skip
    for name, data in (("real", real), ("sim", sim)):
        hop = data.get("router_hop")
        if hop:
            r, d = statistics.median(hop["router"]), statistics.median(hop["direct"])
            print(f"router hop, {name} (client wall): router {1000 * r:.1f} ms, direct "
                  f"{1000 * d:.1f} ms, hop {1000 * (r - d):.1f} ms")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--engine", choices=["vllm", "sim"], required=True)
    run.add_argument("experiment", type=Path)
    run.add_argument("out", type=Path)
    run.add_argument("--workers", type=int, default=6)
    run.add_argument("--busy", default="0,1,2,3,5")
    run.add_argument("--per-worker", default="2,8")
    run.add_argument("--lengths", default="1024,2371,4000")
    run.add_argument("--model-dir", type=Path)
    run.add_argument("--scale", type=float, default=8.0, help="sim: wall s per simulated s")
    run.add_argument("--ready-timeout", type=float, default=400)
    run.add_argument("--router", action="store_true")
    run.add_argument("--together", default="", help="KxR,...: K workers, R misses each at once")
    compare = sub.add_parser("compare")
    compare.add_argument("real", type=Path)
    compare.add_argument("sim", type=Path)
    args = parser.parse_args()
    if args.command == "compare":
        _compare(args.real, args.sim)
        return 0
    result = asyncio.run(_run(args))
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
