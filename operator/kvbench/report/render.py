"""The whole report of a results directory: tables on a console, plots as PNG files."""

from collections import defaultdict
from pathlib import Path

from rich.console import Console

from kvbench.api import ExperimentSpec, RunRecord
from kvbench.loadgen.results import read_result
from kvbench.report.conditions import arm_notes, describe
from kvbench.report.plots import plot_hit_rates, plot_ttft
from kvbench.report.reference_table import reference_table, reference_warnings
from kvbench.report.references import Reference
from kvbench.report.tables import (
    goodput_table,
    hit_miss_table,
    hit_rate_table,
    latency_clock,
    per_pod_table,
    throughput_table,
    ttft_table,
    turn_table,
)
from kvbench.report.trials import group_trials
from kvbench.runner.mapping import ttft_samples
from kvbench.runner.stores import RunStore

__all__ = ["plot_title", "render_report"]


def plot_title(name: str, spec: ExperimentSpec, records: list[RunRecord]) -> str:
    """`NAME: 6 workers, KV 9,360 tokens per worker` (the KV size the servers reported, else
    the one they were given)."""
    sizes = sorted({p.kv_cache_tokens for r in records for p in r.pods if p.kv_cache_tokens})
    if sizes:
        kv = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
        kv = f"KV {kv} tokens per worker"
    elif spec.engine.kv_cache_memory_bytes is not None:
        kv = f"KV {spec.engine.kv_cache_memory_bytes:,} B per worker"
    else:
        kv = "KV size not reported"
    return f"{name}: {spec.total_workers} workers, {kv}"


def render_report(
    store: RunStore, console: Console, plot_dir: Path, reference: Reference | None = None
) -> list[Path]:
    """Print the report of `store` on `console`; write its plots into `plot_dir`; return the
    plot paths. Failed runs are listed, and left out of every table. With `reference`, the
    published figures stand beside the measured ones."""
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
    groups = group_trials(records)
    clock = latency_clock(records)
    errors = sum(r.summary.errors for r in records)
    console.print(
        f"[bold]{experiment.metadata.name}[/bold]: {len(records)} runs, "
        f"{sum(r.summary.requests for r in records)} measured requests, {errors} errors"
    )
    if reference is not None:
        console.print(f"Reproduces {reference.id}: {reference.source}")
        for warning in reference_warnings(reference, spec, records):
            console.print(f"[yellow]Not the published conditions:[/yellow] {warning}")
    for line in describe(spec, records):
        console.print(f"  {line}", highlight=False)
    for note in arm_notes(spec, records):
        console.print(note)
    bound = [r.id for r in records if r.summary.client_bound]
    if bound:
        console.print(
            f"[yellow]{len(bound)} of {len(records)} runs were client-bound[/yellow] (the load "
            "generator, not the servers, set the pace, so fewer requests were in flight than "
            f"asked; raw/<id>.json says why): {', '.join(bound)}"
        )
    if reference is not None:
        console.print(reference_table(reference, points, groups))
    if spec.workload.shared_prefix is not None:
        console.print(hit_rate_table(spec, points, groups))
    console.print(ttft_table(points, clock, groups))
    console.print(throughput_table(points, clock, groups))
    if spec.slo is not None:
        console.print(goodput_table(spec, points, clock, groups))
    if spec.workload.conversation is not None:
        console.print(turn_table(points, clock, groups))
    if spec.workload.shared_prefix is not None:
        console.print(hit_miss_table(records, clock))
        console.print(per_pod_table(records))
    samples: dict[tuple[int, str], list[float]] = defaultdict(list)
    for record in records:
        if record.raw_results:
            result = read_result(store.read_raw(record.raw_results))
            label = f"{record.arm} / {record.variant}"
            if record.point.prefixes is not None:
                label += f" / p{record.point.prefixes}"
            if record.point.request_rate is not None:
                label += f" / {record.point.request_rate:g} req/s"
            samples[(record.point.concurrency, label)] += ttft_samples(result)
    title = plot_title(experiment.metadata.name, spec, records)
    written = [
        plot_hit_rates(points, plot_dir / "hit_rate.png", title, reference),
        plot_ttft(dict(samples), clock, plot_dir / "ttft.png", title, reference),
    ]
    return [p for p in written if p is not None]
