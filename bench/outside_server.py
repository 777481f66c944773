"""The time a request spends outside the simulated server before its first token, per run of a
results directory that `kvbench run` measured with the simulator
(`kvbench.loadgen.summary.outside_server`: the client's wall TTFT minus the server's share,
its simulated TTFT times the time scale). For a vllm-router arm it holds the router's hop on
this machine; for the Service stand-in and prefix affinity, the connection and the client's
own overhead. The simulated TTFT includes it; a run recorded now also keeps its median
(`outsideServerP50`), and this reads it back from any directory's raw results.

    .venv/bin/python bench/outside_server.py RESULTS_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.loadgen.results import read_result
from kvbench.loadgen.summary import outside_server, stats
from kvbench.runner.stores.directory import DirectoryStore


def main() -> int:
    store = DirectoryStore(Path(sys.argv[1]))
    store.load()
    for record in sorted(store.records(), key=lambda r: r.index):
        if not record.raw_results:
            continue
        records = read_result(store.read_raw(record.raw_results)).records()
        timed = [r for r in records if r.phase == "measured" and r.ok and r.sim]
        if not timed:
            continue
        outside = stats(outside_server(r) for r in timed)
        p50, p90 = (1000 * (q or 0.0) for q in (outside.p50, outside.p90))
        print(f"{record.id:32} time scale {timed[0].sim.time_scale}: outside the server "
              f"p50 {p50:5.1f}  p90 {p90:5.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
