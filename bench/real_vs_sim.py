"""One experiment file on the simulator and on real vLLM, compared run by run.

Runs `kvbench run FILE` into OUT/sim and, with --real, `kvbench run FILE --engine vllm` into
OUT/real (same file, so the same seeds and request digests), then prints per run: digest
equal, request hit rate, token hit rate from the responses and from the counters, TTFT p50
(each side on its own clock: simulated seconds, wall seconds), the servers' own mean TTFT
(their TTFT histograms: without the network and a router in front), preemptions and whether every
pod served as many requests; then the medians over trials per point, and how many runs keep
the bounds issue 23 set (hit rate within 3 points, each arm's gain over the Service within 5,
TTFT p50 within 20 %) with the runs that do not. Either side resumes
where it stopped (kvbench run's own resume), so a cut-short run is finished by running again.

    .venv/bin/python bench/real_vs_sim.py FILE OUT                 # the simulator side
    python bench/real_vs_sim.py FILE OUT --real [--gpus 0] ...     # both, on a GPU machine
    .venv/bin/python bench/real_vs_sim.py --compare SIM_DIR REAL_DIR

On a machine without the Hugging Face Hub: --model-dir DIR --vllm-arg=--load-format=dummy
(docs/simulator.md, "Against real vLLM"). --reset-cache turns `freshness: restart` into
reset-cache on both sides (a vLLM start costs about a minute).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from kvbench.loadgen.results import read_result
from kvbench.runner import DirectoryStore

DEV_MODE = "VLLM_SERVER_DEV_MODE"


@dataclass(frozen=True)
class Figures:
    """One recorded run, as the table compares it."""

    point: str
    digest: str | None
    request_hit: float | None
    token_hit_responses: float | None
    token_hit_counters: float | None
    ttft_p50: float | None
    server_ttft_mean: float | None
    clock: str | None
    preemptions: float
    pod_requests: dict[str, float]
    error: str | None


def load(root: Path) -> dict[str, Figures]:
    """Every recorded run of a results directory (format 2), by run id; none when absent."""
    store = DirectoryStore(root)
    if not store.is_results_directory():
        return {}
    store.load()
    runs = {}
    for record in store.records():
        hits = None
        if record.raw_results is not None and record.error is None:
            hits = read_result(store.read_raw(record.raw_results)).summary.hit_rates
        runs[record.id] = Figures(
            point=record.id.rsplit(".", 1)[0],
            digest=record.digest,
            request_hit=record.summary.request_hit_rate,
            token_hit_responses=hits.token_hit_rate_responses if hits else None,
            token_hit_counters=hits.token_hit_rate_counters if hits else None,
            ttft_p50=record.summary.ttft_p50,
            server_ttft_mean=record.summary.server_ttft_mean,
            clock=record.summary.latency_clock if record.error is None else None,
            preemptions=sum(p.preemptions for p in record.pods),
            pod_requests={p.pod: p.requests for p in record.pods},
            error=(record.error or "").splitlines()[0] if record.error else None,
        )
    return runs


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.0f}"


def num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def pair(fmt, sim: float | None, real: float | None, width: int = 0) -> str:
    return f"{fmt(sim):>{width}} / {fmt(real):<{width}}"


def same(a: object, b: object) -> str:
    return "same" if a == b else "DIFF"


MEDIANS = [
    ("req hit", pct, "request_hit", " %"),
    ("tok hit resp", pct, "token_hit_responses", " %"),
    ("ctr", pct, "token_hit_counters", " %"),
    ("TTFT p50", ms, "ttft_p50", " ms"),
    ("server TTFT mean", ms, "server_ttft_mean", " ms"),
    ("preempt", num, "preemptions", ""),
]
"""The medians per point: label, format, Figures field, unit."""


def table(sim: dict[str, Figures], real: dict[str, Figures]) -> list[str]:
    """The run-by-run lines, then the medians per point (over runs recorded on both sides)."""
    lines = [
        f"{'run (figures: sim / real)':<34} {'digest':>6} | {'req hit %':^17} | "
        f"{'tok hit % resp':^17} | {'tok hit % ctr':^17} | {'TTFT p50 ms':^17} | "
        f"{'srv TTFT mean ms':^17} | {'preempt':^13} | pods"
    ]
    both = []
    for rid in sorted(set(sim) | set(real), key=lambda r: (sim.get(r) or real[r]).point + r):
        s, r = sim.get(rid), real.get(rid)
        if s is None or r is None or s.error or r.error:
            where = "sim" if r is None else "real" if s is None else ""
            why = f"only in {where}" if where else f"failed: {(s.error or r.error)}"[:120]
            lines.append(f"{rid:<34} {why}")
            continue
        both.append(rid)
        lines.append(
            f"{rid:<34} {same(s.digest, r.digest):>6} | "
            f"{pair(pct, s.request_hit, r.request_hit, 7)} | "
            f"{pair(pct, s.token_hit_responses, r.token_hit_responses, 7)} | "
            f"{pair(pct, s.token_hit_counters, r.token_hit_counters, 7)} | "
            f"{pair(ms, s.ttft_p50, r.ttft_p50, 7)} | "
            f"{pair(ms, s.server_ttft_mean, r.server_ttft_mean, 7)} | "
            f"{pair(num, s.preemptions, r.preemptions, 5)} | "
            f"{same(s.pod_requests, r.pod_requests)}"
        )
    clocks = [
        f"{side} {'/'.join(sorted({f.clock for f in runs.values() if f.clock})) or '-'}"
        for side, runs in (("sim", sim), ("real", real))
    ]
    lines.append(f"TTFT clocks: {', '.join(clocks)}")
    lines += ["", "median over trials, sim / real"]
    for point in sorted({sim[rid].point for rid in both}):
        ids = [rid for rid in both if sim[rid].point == point]

        def med(runs: dict[str, Figures], field: str, ids: list[str] = ids) -> float | None:
            values = [getattr(runs[i], field) for i in ids if getattr(runs[i], field) is not None]
            return statistics.median(values) if values else None

        figures = ", ".join(
            f"{label} {pair(fmt, med(sim, field), med(real, field))}{unit}"
            for label, fmt, field, unit in MEDIANS
        )
        digests = sum(sim[i].digest == real[i].digest for i in ids)
        pods = sum(sim[i].pod_requests == real[i].pod_requests for i in ids)
        lines.append(
            f"  {point:<30} trials {len(ids)}: {figures}, digests same {digests}/{len(ids)}, "
            f"pods same {pods}/{len(ids)}"
        )
    return lines


@dataclass(frozen=True)
class Bounds:
    """How close the simulator must come to real vLLM on one run (issue 23, item 3)."""

    hit_points: float = 3.0
    gain_points: float = 5.0
    ttft_ratio: float = 0.20
    baseline: str = "service"
    """The arm each arm's gain is measured over (its run ids name it where the arm's stand)."""


def bounds(sim: dict[str, Figures], real: dict[str, Figures], limits: Bounds) -> list[str]:
    """Per run recorded on both sides, the bounds it keeps: request hit rate within
    `hit_points`, its gain over the baseline arm's run of the same point and trial within
    `gain_points` (each side's own), TTFT p50 within `ttft_ratio`; the runs off, then the
    counts."""
    both = [r for r in sorted(sim) if r in real and not (sim[r].error or real[r].error)]
    off, kept = [], {"digest": 0, "hit": 0, "gain": 0, "ttft": 0}
    for rid in both:
        s, r = sim[rid], real[rid]
        variant, _, rest = rid.split(".", 2)
        base = f"{variant}.{limits.baseline}.{rest}"
        hit = gain = ttft = None
        if s.request_hit is not None and r.request_hit is not None:
            hit = 100 * (s.request_hit - r.request_hit)
            base_sim = sim[base].request_hit if base in both else None
            base_real = real[base].request_hit if base in both else None
            if base_sim is not None and base_real is not None:
                gain = hit - 100 * (base_sim - base_real)
        if s.ttft_p50 and r.ttft_p50:
            ttft = s.ttft_p50 / r.ttft_p50 - 1
        checks = {
            "digest": s.digest == r.digest,
            "hit": hit is not None and abs(hit) <= limits.hit_points,
            "gain": gain is None or abs(gain) <= limits.gain_points,
            "ttft": ttft is not None and abs(ttft) <= limits.ttft_ratio,
        }
        for name, ok in checks.items():
            kept[name] += ok
        if not all(checks.values()):
            off.append(
                f"  off: {rid:<32} hit {'-' if hit is None else f'{hit:+.1f}'} points, gain "
                f"{'-' if gain is None else f'{gain:+.1f}'}, TTFT p50 "
                f"{'-' if ttft is None else f'{100 * ttft:+.0f} %'}"
                f"{'' if checks['digest'] else ', digest differs'}"
            )
    n = len(both)
    return [
        f"bounds: runs {n}, digest the same {kept['digest']}, request hit rate within "
        f"{limits.hit_points:g} points {kept['hit']}, gain over {limits.baseline} within "
        f"{limits.gain_points:g} points {kept['gain']}, TTFT p50 within "
        f"{100 * limits.ttft_ratio:.0f} % {kept['ttft']}",
        *off,
    ]


def reset_cache_file(file: Path, out: Path) -> Path:
    """`file` with freshness reset-cache and VLLM_SERVER_DEV_MODE=1 (what vLLM needs for it)."""
    document = yaml.safe_load(file.read_text())
    spec = document["spec"]
    spec["freshness"] = "reset-cache"
    env = [v for v in spec["engine"].get("env", []) if v.get("name") != DEV_MODE]
    spec["engine"]["env"] = [*env, {"name": DEV_MODE, "value": "1"}]
    derived = out / f"{file.stem}-reset-cache.yaml"
    out.mkdir(parents=True, exist_ok=True)
    derived.write_text(yaml.safe_dump(document, sort_keys=False))
    return derived


def real_env(offline: bool) -> dict[str, str]:
    """Defaults for a benchmark box that this environment has not set: no usage reports, no
    Hub when the models are local, vLLM's own sampler when flashinfer is absent."""
    defaults = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}
    if offline:
        defaults |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if importlib.util.find_spec("flashinfer") is None:
        defaults["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    return {k: v for k, v in defaults.items() if k not in os.environ}


def kvbench_run(argv: list[str], log: Path, env: dict[str, str], deadline: float | None) -> int:
    """`kvbench run` with its output in `log` and `env` over this environment; interrupted as
    Ctrl-C does (it stops every process and can be resumed) once `deadline` (monotonic) has
    passed."""
    print(" ".join(["kvbench", *argv[3:]]), f"> {log}", flush=True)
    with log.open("a") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ) | env
        )
        try:
            remaining = None if deadline is None else max(1.0, deadline - time.monotonic())
            return child.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
            print("  deadline: interrupted (run the same command again to resume)", flush=True)
            return child.wait()


def run_sides(args: argparse.Namespace) -> tuple[Path, Path]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    file = reset_cache_file(args.file, out) if args.reset_cache else args.file
    deadline = None if args.deadline is None else time.monotonic() + args.deadline
    base = [sys.executable, "-m", "kvbench", "run", str(file)]
    code = kvbench_run([*base, "--out", str(out / "sim")], out / "sim.log", {}, deadline)
    print(f"  sim: exit {code}", flush=True)
    if args.real:
        real = [*base, "--out", str(out / "real"), "--engine", "vllm"]
        if args.vllm_command:
            real += ["--vllm-command", args.vllm_command]
        if args.gpus:
            real += ["--gpus", args.gpus]
        if args.model_dir:
            real += ["--model-dir", str(args.model_dir)]
        real += [f"--vllm-arg={a}" for a in args.vllm_arg]
        env = real_env(offline=args.model_dir is not None)
        code = kvbench_run(real, out / "real.log", env, deadline)
        print(f"  real: exit {code}", flush=True)
    return out / "sim", out / "real"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, help="experiment file")
    parser.add_argument("out", nargs="?", type=Path, help="holds sim/ and real/")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("SIM_DIR", "REAL_DIR"),
        help="only print the table of two results directories",
    )
    parser.add_argument("--real", action="store_true", help="also run it on real vLLM")
    parser.add_argument("--vllm-command", help="as kvbench run's")
    parser.add_argument("--gpus", help="as kvbench run's")
    parser.add_argument("--model-dir", type=Path, help="as kvbench run's")
    parser.add_argument("--vllm-arg", action="append", default=[], help="as kvbench run's")
    parser.add_argument(
        "--reset-cache", action="store_true", help="freshness reset-cache (both sides)"
    )
    parser.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="interrupt after this long (resumable)"
    )
    parser.add_argument("--json", type=Path, help="also write both sides' figures here")
    parser.add_argument(
        "--baseline", default="service", help="the arm gains are measured over (its name)"
    )
    args = parser.parse_args()
    if args.compare:
        if args.file or args.real:
            parser.error("--compare takes two results directories and nothing else")
        sim_dir, real_dir = args.compare
    elif args.file is None or args.out is None:
        parser.error("give FILE and OUT, or --compare SIM_DIR REAL_DIR")
    else:
        sim_dir, real_dir = run_sides(args)
    sim, real = load(sim_dir), load(real_dir)
    print(f"\nsim: {sim_dir} ({len(sim)} runs)   real: {real_dir} ({len(real)} runs)\n")
    print("\n".join(table(sim, real)))
    print("\n".join(["", *bounds(sim, real, Bounds(baseline=args.baseline))]))
    if args.json:
        sides = {"sim": sim, "real": real}
        document = {
            side: {rid: asdict(f) for rid, f in runs.items()} for side, runs in sides.items()
        }
        args.json.write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
