"""The whole report of a results directory: tables on a console, plots as PNG files."""

from collections import defaultdict
from pathlib import Path

from rich.console import Console

from kvbench.loadgen.results import read_result
from kvbench.report.plots import plot_hit_rates, plot_ttft
from kvbench.report.tables import (
    hit_miss_table,
    hit_rate_table,
    latency_clock,
    per_pod_table,
    throughput_table,
    ttft_table,
)
from kvbench.runner.mapping import ttft_samples
from kvbench.runner.stores import RunStore

__all__ = ["render_report"]


def render_report(store: RunStore, console: Console, plot_dir: Path) -> list[Path]:
    """Print the report of `store` on `console`; write its plots into `plot_dir`; return the
    plot paths. Failed runs are listed, and left out of every table."""
    experiment = store.experiment()
    spec = experiment.spec
    failed = [r for r in store.records() if r.error is not None]
    records = [r for r in store.records() if r.error is None]
    for record in failed:
        console.print(
            f"[red]run {record.id} failed[/red] after {len(record.failed_attempts)} "
            f"attempt(s): {record.error_reason}: {(record.error or '').splitlines()[0]}"
        )
    if not records:
        console.print(f"{store.location().location}: no recorded runs yet")
        return []
    points = store.aggregate()
    clock = latency_clock(records)
    errors = sum(r.summary.errors for r in records)
    console.print(
        f"[bold]{experiment.metadata.name}[/bold]: {len(records)} runs, "
        f"{sum(r.summary.requests for r in records)} measured requests, {errors} errors"
    )
    if clock == "simulated":
        console.print(
            f"Latencies are in simulated seconds (kvbench sim, time scale "
            f"{spec.simulator.time_scale:g}: one simulated second took "
            f"{spec.simulator.time_scale:g} s of wall time)."
        )
    bound = [r.id for r in records if r.summary.client_bound]
    if bound:
        console.print(
            f"[yellow]{len(bound)} of {len(records)} runs were client-bound[/yellow] (the load "
            "generator, not the servers, set the pace, so fewer requests were in flight than "
            f"asked; raw/<id>.json says why): {', '.join(bound)}"
        )
    scaled = sorted({r.arm for r in records if r.summary.latency_clock == "scaled"})
    if scaled:
        console.print(
            f"Arms {', '.join(scaled)} run Dynamo's mocker, which reports no clock of its own: "
            "their latencies are wall time / time scale, which multiplies the real overhead "
            "of the frontend and the client too. Compare them with each other; their hit "
            "rates compare with every arm."
        )
    if spec.workload.shared_prefix is not None:
        console.print(hit_rate_table(spec, points))
    console.print(ttft_table(points, clock))
    console.print(throughput_table(points, clock))
    if spec.workload.shared_prefix is not None:
        console.print(hit_miss_table(records, clock))
        console.print(per_pod_table(records))
    samples: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.raw_results:
            result = read_result(store.read_raw(record.raw_results))
            samples[f"{record.arm} / {record.variant} / {record.point.key}"] += ttft_samples(result)
    written = [
        plot_hit_rates(points, plot_dir / "hit_rate.png"),
        plot_ttft(dict(samples), clock, plot_dir / "ttft.png"),
    ]
    return [p for p in written if p is not None]
