"""The time a request spends outside the simulated server before its first token, per run of a
results directory that `kvbench run` measured at time scale 1: the client's wall TTFT minus
the server's own arrival-to-first-token time (its simulated TTFT times the time scale). For a
vllm-router arm this is the router's hop on this machine, which the simulated TTFT leaves out
and a real client's TTFT includes; for the Service stand-in and prefix affinity it is the
connection and the client's own overhead.

    .venv/bin/python bench/outside_server.py RESULTS_DIR
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from kvbench.loadgen.results import read_result
from kvbench.runner.stores.directory import DirectoryStore


def main() -> int:
    store = DirectoryStore(Path(sys.argv[1]))
    store.load()
    for record in sorted(store.records(), key=lambda r: r.index):
        if not record.raw_results:
            continue
        records = read_result(store.read_raw(record.raw_results)).records()
        timed = [r for r in records if r.phase == "measured" and r.ttft and r.sim and r.sim.ttft]
        if not timed:
            continue
        outside = sorted(r.ttft - r.sim.ttft * (r.sim.time_scale or 1.0) for r in timed)
        p10, p90 = (1000 * outside[int(q * (len(outside) - 1))] for q in (0.1, 0.9))
        p50 = 1000 * statistics.median(outside)
        print(f"{record.id:32} time scale {timed[0].sim.time_scale}: outside the server p10 "
              f"{p10:5.1f}  p50 {p50:5.1f}  p90 {p90:5.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
