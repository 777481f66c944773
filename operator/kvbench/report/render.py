"""The whole report of a results directory: tables on a console, plots as PNG files."""

from collections import defaultdict
from pathlib import Path

from rich.console import Console

from kvbench.report.plots import plot_hit_rates, plot_ttft
from kvbench.report.tables import (
    hit_miss_table,
    hit_rate_table,
    latency_clock,
    per_pod_table,
    throughput_table,
    ttft_table,
)
from kvbench.runner.aggregate import aggregate
from kvbench.runner.outcome import ttft_samples
from kvbench.runner.store import ResultsStore

__all__ = ["render_report"]


def render_report(store: ResultsStore, console: Console) -> list[Path]:
    """Print the report of `store` on `console`; write its plots; return the plot paths."""
    experiment = store.experiment()
    spec = experiment.spec
    records = store.records()
    if not records:
        console.print(f"{store.root}: no finished runs yet")
        return []
    points = aggregate(spec, records)
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
            raw = (store.root / record.raw_results).read_text()
            samples[f"{record.arm} / {record.variant} / {record.point.key}"] += ttft_samples(raw)
    written = [
        plot_hit_rates(points, store.root / "hit_rate.png"),
        plot_ttft(dict(samples), clock, store.root / "ttft.png"),
    ]
    return [p for p in written if p is not None]
