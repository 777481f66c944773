"""Where a router arm's prefixes went, and the first wave of requests that decided it.

vllm-router's `cache_aware` sends a prompt that matches no worker's tree to the worker with the
fewest requests in flight (the first such worker on a tie), and every later request of that
prefix follows it. Below its load thresholds (64 in flight) nothing else moves a prefix, so the
split of requests among the pods is settled by the warm-up: which of the first concurrent
requests, all misses, finished first and freed its worker for the next new prefix. On workers
sharing a GPU that is the shared GPU's timing of several long prefills at once. Per run of
each results directory (run ids containing MATCH):

    .venv/bin/python bench/first_wave.py MATCH DIR...

prints the requests per pod (sorted) and, of the first wave (the first `concurrency` requests
sent, warm-up first), the TTFTs sorted and when the first and the last of them ended.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.results import read_result
from kvbench.runner.stores.directory import DirectoryStore


def first_wave(records: list[RequestRecord], concurrency: int) -> list[RequestRecord]:
    """The first `concurrency` requests sent, warm-up before the measured window."""
    sent = sorted(records, key=lambda r: (r.phase != "warmup", r.start))
    return sent[:concurrency]


def describe(run_id: str, pods: list[int], wave: list[RequestRecord]) -> str:
    ttfts = sorted(round(1000 * r.ttft) for r in wave if r.ttft is not None)
    ends = [r.end for r in wave]
    return (
        f"{run_id:32} requests per pod {sorted(pods)}  first {len(wave)}: TTFT ms {ttfts}, "
        f"ended {1000 * min(ends):.0f}-{1000 * max(ends):.0f} ms"
    )


def main() -> int:
    match, *directories = sys.argv[1:]
    for directory in directories:
        store = DirectoryStore(Path(directory))
        store.load()
        print(directory)
        for record in sorted(store.records(), key=lambda r: r.index):
            if match not in record.id or not record.raw_results:
                continue
            result = read_result(store.read_raw(record.raw_results))
            wave = first_wave(result.records(), result.config.point.concurrency)
            pods = [int(p.requests or 0) for p in record.pods]
            print("  " + describe(record.id, pods, wave))
    return 0


if __name__ == "__main__":
    sys.exit(main())
