"""The article-002 grid in virtual time: how long it takes, and how fast the simulation runs.

Runs an experiment file (default: examples/prefix-cache-service.yaml, 36 runs on 6 workers)
with `kvbench run --virtual`'s back end, in this process, into a fresh directory, and prints:
the wall and CPU seconds of the whole experiment (planning, runs, records, aggregate; not the
report), the simulated requests (warm-up and measured) and engine steps of every run, and the
simulation's rate: simulated requests per wall second inside the discrete-event runs alone
(`run_virtual_load`), and per wall second of the whole experiment.

    .venv/bin/python bench/virtual_grid.py [FILE] [--pin]        # one core: taskset -c 0 ...

With --http-seconds S it also prints the HTTP path's time for the same grid, measured
elsewhere (e.g. `time kvbench run FILE`), beside the virtual one.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

import kvbench.runner.cluster.virtual.cluster as virtual_cluster
from kvbench.cli.common import read_experiment, read_trace
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster.virtual.cluster import VirtualCluster, in_virtual_time

ROOT = Path(__file__).resolve().parents[1]


class _Counted:
    """`run_virtual_load` with its wall time, requests and steps tallied."""

    def __init__(self, inner):
        self.inner, self.seconds, self.cpu, self.requests, self.steps = inner, 0.0, 0.0, 0, 0

    def __call__(self, config, workers, seed=None, trace=None):
        before = sum(w.engine.core.num_steps for w in workers.values())
        start, cpu = time.perf_counter(), time.thread_time()
        result = self.inner(config, workers, seed, trace)
        self.seconds += time.perf_counter() - start
        self.cpu += time.thread_time() - cpu
        self.requests += len(result.requests.phase)
        self.steps += sum(w.engine.core.num_steps for w in workers.values()) - before
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file", nargs="?", default=ROOT / "examples/prefix-cache-service.yaml")
    parser.add_argument("--http-seconds", type=float, help="The HTTP path's time, for the table")
    args = parser.parse_args()
    experiment = in_virtual_time(read_experiment(Path(args.file)))
    counted = _Counted(virtual_cluster.run_virtual_load)
    virtual_cluster.run_virtual_load = counted
    with tempfile.TemporaryDirectory() as out:
        runner = ExperimentRunner(
            experiment,
            VirtualCluster(Path(out) / "work"),
            DirectoryStore(Path(out)),
            trace=read_trace(experiment),
        )
        cpu0, start = time.process_time(), time.perf_counter()
        result = asyncio.run(runner.run())
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    failed = len(result.failed)
    print(f"{args.file}: {len(result.records)} runs ({failed} failed)")
    print(f"  experiment: {wall:.1f} s wall, {cpu:.1f} s CPU (virtual time, one process)")
    print(f"  simulated: {counted.requests} requests, {counted.steps} engine steps")
    print(
        f"  discrete-event runs: {counted.seconds:.1f} s wall, {counted.cpu:.1f} s CPU: "
        f"{counted.requests / counted.cpu:,.0f} requests and {counted.steps / counted.cpu:,.0f} "
        "steps per CPU second"
    )
    rate = counted.requests / wall
    print(f"  whole experiment: {rate:,.0f} simulated requests per wall second")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak memory: {peak:.0f} MiB")
    if args.http_seconds:
        ratio = args.http_seconds / wall
        print(f"  HTTP path, same grid: {args.http_seconds:.0f} s ({ratio:.0f}x virtual's time)")


if __name__ == "__main__":
    main()
