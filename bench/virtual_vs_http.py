"""Virtual time against the HTTP path, run by run, on one experiment file.

Runs FILE at time scale 1 through `kvbench run` (simulated workers as HTTP servers on
loopback, the real load generator) into OUT/http, and with `--virtual` into OUT/virtual,
timing both; then prints per run: digests equal, request and token hit rates, the Service's
per-pod request counts equal, and the simulated TTFT p50/p90 and ITL p50 of both with their
relative difference; then the largest differences over all runs. Either side resumes where it
stopped (`kvbench run`'s own resume); `--compare` only compares two finished directories.

    .venv/bin/python bench/virtual_vs_http.py examples/prefix-cache-service.yaml OUT
    .venv/bin/python bench/virtual_vs_http.py --compare OUT/http OUT/virtual
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kvbench.api import RunRecord
from kvbench.runner import DirectoryStore


def _records(directory: Path) -> dict[str, RunRecord]:
    store = DirectoryStore(directory)
    store.load()
    return {r.id: r for r in store.records() if r.error is None}


def _run(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _rel(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return ours / theirs - 1


def compare(http_dir: Path, virtual_dir: Path) -> None:
    http, virtual = _records(http_dir), _records(virtual_dir)
    worst: dict[str, float] = {}
    print(f"{'run':34} dig  hit http/virt   tok http/virt   pods  TTFT p50 ms", end="")
    print("      p90 ms       ITL p50 ms")
    for run_id in sorted(http, key=lambda i: http[i].index):
        if run_id not in virtual:
            print(f"{run_id:34} (no virtual run)")
            continue
        h, v = http[run_id], virtual[run_id]
        hs, vs = h.summary, v.summary
        pods = {p.pod: p.requests for p in h.pods} == {p.pod: p.requests for p in v.pods}
        cells = []
        for figure in ("ttft_p50", "ttft_p90", "itl_p50"):
            a, b = getattr(hs, figure), getattr(vs, figure)
            diff = _rel(b, a)
            if diff is not None:
                worst[figure] = max(worst.get(figure, 0.0), abs(diff))
            cell = f"{a * 1000:6.1f}/{b * 1000:6.1f} {diff:+5.0%}" if diff is not None else "-"
            cells.append(cell)
        for name, a, b in (
            ("request hit", hs.request_hit_rate, vs.request_hit_rate),
            ("token hit", hs.token_hit_rate, vs.token_hit_rate),
        ):
            if a is not None and b is not None:
                worst[name] = max(worst.get(name, 0.0), abs(a - b) * 100)
        print(
            f"{run_id:34} {'=' if h.digest == v.digest else 'X':3} "
            f"{hs.request_hit_rate:6.1%}/{vs.request_hit_rate:6.1%} "
            f"{hs.token_hit_rate:6.1%}/{vs.token_hit_rate:6.1%} "
            f"{'same' if pods else 'DIFF':5} " + "  ".join(cells)
        )
    print("largest difference over the runs:")
    for name, value in worst.items():
        unit = " points" if "hit" in name else " %"
        print(f"  {name}: {value if 'hit' in name else value * 100:.1f}{unit}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file", nargs="?", type=Path)
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("HTTP_DIR", "VIRTUAL_DIR"))
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if args.file is None or args.out is None:
        parser.error("give FILE and OUT, or --compare HTTP_DIR VIRTUAL_DIR")
    document = yaml.safe_load(args.file.read_text())
    document["spec"].setdefault("simulator", {})["timeScale"] = 1.0
    args.out.mkdir(parents=True, exist_ok=True)
    file = args.out / "experiment-time-scale-1.yaml"
    file.write_text(yaml.safe_dump(document))
    kvbench = [sys.executable, "-m", "kvbench", "run", str(file)]
    http_s = _run([*kvbench, "--out", str(args.out / "http")])
    virtual_s = _run([*kvbench, "--virtual", "--out", str(args.out / "virtual")])
    print(f"HTTP path at time scale 1: {http_s:.0f} s; virtual time: {virtual_s:.1f} s")
    compare(args.out / "http", args.out / "virtual")


if __name__ == "__main__":
    main()
