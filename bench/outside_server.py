"""The time a request spends outside the simulated server before its first token, per run of a
results directory that `kvbench run` measured at time scale 1: the client's wall TTFT minus
the server's own arrival-to-first-token time (its simulated TTFT times the time scale). For a
vllm-router arm this is the router's hop on this machine, which the simulated TTFT leaves out
and a real client's TTFT includes; for the Service stand-in and prefix affinity it is the
connection and the client's own overhead.

    .venv/bin/python bench/outside_server.py RESULTS_DIR
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

from kvbench.loadgen.columns import RequestColumns


def main() -> int:
    root = Path(sys.argv[1])
    ids = {}
    for line in (root / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        ids.setdefault(event["index"], event["id"])
    for path in sorted(root.glob("raw/r*-a*.json.gz")):
        data = json.loads(gzip.decompress(path.read_bytes()))
        records = RequestColumns.model_validate(data["requests"]).records()
        timed = [r for r in records if r.phase == "measured" and r.ttft and r.sim and r.sim.ttft]
        if not timed:
            continue
        outside = sorted(r.ttft - r.sim.ttft * (r.sim.time_scale or 1.0) for r in timed)
        index = int(path.name[1:].split("-")[0])
        ms = [1000 * outside[int(q * (len(outside) - 1))] for q in (0.1, 0.9)]
        print(f"{ids.get(index, path.name):32} time scale {timed[0].sim.time_scale}: outside the "
              f"server p10 {ms[0]:5.1f}  p50 {1000 * statistics.median(outside):5.1f}  p90 "
              f"{ms[1]:5.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
