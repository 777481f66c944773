"""How much a router's choices move with the time scale (and the machine's load).

vllm-router's `cache_aware` and `kv_aware` (and Dynamo's router) balance by the requests in
flight on the wall clock. Under `kvbench sim` a simulated second lasts `timeScale` wall
seconds while the router's own latency, the client's and this machine's load do not scale,
so the router may see another order of arrivals and completions than the hardware would
give it. This runs the router arms of FILE at each time scale (`simulator.routerTimeScale`),
optionally with CPU burners beside them, and prints per run the request hit rate and every
pod's share of the requests against the run at the largest scale.

    .venv/bin/python bench/router_time_scale.py FILE OUT [--scales 0.05,0.25,1] [--burn 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
from pathlib import Path

import yaml

from kvbench.runner import DirectoryStore

ROOT = Path(__file__).resolve().parents[1]


def _burn() -> None:
    while True:
        pass


def _run(document: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "experiment.in.yaml"
    path.write_text(yaml.safe_dump(document))
    subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(path), "--out", str(out / "results")],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _shares(record) -> dict[str, float]:
    total = sum(p.requests or 0 for p in record.pods) or 1
    return {p.pod: (p.requests or 0) / total for p in record.pods}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scales", default="0.05,0.25,1")
    parser.add_argument("--burn", type=int, default=0, help="CPU-burning processes beside")
    args = parser.parse_args()
    scales = sorted(float(s) for s in args.scales.split(","))
    base = yaml.safe_load(args.file.read_text())
    base["spec"]["routing"] = [
        a for a in base["spec"]["routing"] if "router" in a or "dynamo" in a
    ]
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.burn)]
    for burner in burners:
        burner.start()
    try:
        for scale in scales:
            document = yaml.safe_load(yaml.safe_dump(base))
            document["spec"].setdefault("simulator", {})["routerTimeScale"] = scale
            _run(document, args.out / f"s{scale:g}")
    finally:
        for burner in burners:
            burner.terminate()
    stores = {s: DirectoryStore(args.out / f"s{s:g}" / "results") for s in scales}
    for store in stores.values():
        store.load()
    reference = {r.id: r for r in stores[scales[-1]].records()}
    print(f"{args.file.name}: router arms at time scales {scales}, {args.burn} CPU burners; "
          f"per-pod share distance: half the sum of |share - share at {scales[-1]:g}|")  # fmt: skip
    print(f"{'run':34} {'scale':>6} {'req hit':>8} {'distance':>9}  requests per pod")
    for scale in scales:
        for record in sorted(stores[scale].records(), key=lambda r: r.index):
            ref = reference[record.id]
            ours, theirs = _shares(record), _shares(ref)
            distance = sum(abs(ours[p] - theirs.get(p, 0)) for p in ours) / 2
            pods = [int(p.requests or 0) for p in sorted(record.pods, key=lambda p: p.pod)]
            hit = record.summary.request_hit_rate or 0.0
            print(f"{record.id:34} {scale:>6g} {100 * hit:7.1f}% {100 * distance:8.1f}%  {pods}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
