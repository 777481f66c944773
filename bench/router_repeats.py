"""The same runs repeated, real vLLM beside the simulator: per run id, every repeat's request hit
rate and TTFT p50, and their medians.

A router that balances by load makes choices that follow timing, so a run repeated on identical
requests (same digest) moves on real vLLM as in the simulator; one run of each says little.
Give the results directories of each side (any that hold the run id count as one repeat):

    .venv/bin/python bench/router_repeats.py --real DIR... --sim DIR...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def _runs(directories: list[Path]) -> dict[str, list[tuple[float, float | None, str]]]:
    """Run id -> (request hit %, TTFT p50 ms, digest) of each directory's finished run."""
    found: dict[str, list[tuple[float, float | None, str]]] = {}
    for directory in directories:
        for path in sorted((directory / "runs").glob("r*.json")):
            run = json.loads(path.read_text())
            summary = run.get("summary")
            if run.get("error") or not summary:
                continue
            ttft = summary.get("ttftP50")
            ms = None if ttft is None else 1000 * ttft
            hit = 100 * summary["requestHitRate"]
            found.setdefault(run["id"], []).append((hit, ms, run["digest"]))
    return found


def _cell(values: list[float | None], digits: int) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    listed = ", ".join(f"{v:.{digits}f}" for v in known)
    return f"{listed} (median {statistics.median(known):.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=Path, nargs="+", required=True)
    parser.add_argument("--sim", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    real, sim = _runs(args.real), _runs(args.sim)
    print("| run | request hit %, real vLLM | simulator | TTFT p50 ms, real | simulator |")
    print("|---|---|---|---|---|")
    for run_id in sorted(set(real) & set(sim)):
        digests = {d for *_, d in real[run_id] + sim[run_id]}
        if len(digests) != 1:
            print(f"{run_id}: {len(digests)} digests among the repeats", file=sys.stderr)
            return 1
        sides = (real[run_id], sim[run_id])
        cells = [_cell([h for h, _, _ in side], 1) for side in sides]
        cells += [_cell([t for _, t, _ in side], 0) for side in sides]
        print(f"| {run_id} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
