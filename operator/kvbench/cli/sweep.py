"""`kvbench sweep FILE`: the planner's question in one command, in virtual time. Workers x KV
size x prefixes, the Service against prefix affinity, and where affinity (the bound of
KV-aware routing) stops paying: a table, a plot, and one ordinary results directory per
worker count."""

import asyncio
import json
from pathlib import Path

import click
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvbench.api import AttemptFailure, ExperimentStatus, RunRecord
from kvbench.api.experiment import MAX_WORKERS
from kvbench.api.files import format_errors
from kvbench.api.load import MAX_PREFIXES
from kvbench.cli.common import experiment_argument, make_console, read_experiment
from kvbench.plan import Plan, PlannedRun
from kvbench.plan.sweep import (
    ARM_KINDS,
    Sweep,
    SweepError,
    SweepRequest,
    derive_sweep,
    parse_counts,
    parse_kv_bytes,
    parse_kv_tokens,
)
from kvbench.report.crossover import (
    DEFAULT_THRESHOLD,
    SweepPoint,
    crossover_lines,
    crossover_table,
    find_curves,
    plot_crossover,
    sweep_points,
)
from kvbench.runner import DirectoryStore, ExperimentRunner, RunState, StoreMismatch
from kvbench.runner.cluster.virtual.cluster import VirtualCluster
from kvbench.runner.cluster.virtual.preflight import virtual_problems
from kvbench.runner.failures import SpecNotRunnable

__all__ = ["sweep"]


class _SweepProgress:
    """One bar over every run of the sweep (a line per run would be hundreds); failures are
    printed, and each experiment's status is written beside its results as `kvbench run`
    does."""

    def __init__(self, console: Console, total: int) -> None:
        self.bar = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self.task = self.bar.add_task("", total=total)
        self.store: DirectoryStore | None = None
        self.label = ""

    def start(self, store: DirectoryStore, label: str) -> None:
        self.store, self.label = store, label
        self.bar.start()

    def started(self, plan: Plan, done: int) -> None:
        self.bar.advance(self.task, done)

    def stage(self, run: PlannedRun, state: RunState) -> None:
        self.bar.update(self.task, description=f"{self.label} {run.id}: {state.stage.value}")

    def recorded(self, run: PlannedRun, record: RunRecord) -> None:
        self.bar.advance(self.task)

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None:
        first = failure.message.splitlines()[0] if failure.message else failure.reason
        then = "trying again" if retrying else "[red]run failed[/red]"
        self.bar.console.print(f"{self.label} {run.id}: attempt failed ({first}); {then}")
        if not retrying:
            self.bar.advance(self.task)

    def status(self, status: ExperimentStatus) -> None:
        if self.store is not None:
            self.store.save_status(status)

    def stop(self) -> None:
        self.bar.stop()


def _request(
    workers: str,
    kv_tokens: str | None,
    kv_bytes: str | None,
    prefixes: str | None,
    arms: str,
    pool: str | None,
    concurrency: int | None,
    trials: int | None,
) -> SweepRequest:
    """The options as a checked request; a usage error naming the option otherwise."""
    try:
        return SweepRequest(
            workers=parse_counts(workers, "--workers", MAX_WORKERS),
            kv_tokens=parse_kv_tokens(kv_tokens) if kv_tokens is not None else None,
            kv_bytes=parse_kv_bytes(kv_bytes) if kv_bytes is not None else None,
            prefixes=parse_counts(prefixes, "--prefixes", MAX_PREFIXES) if prefixes else None,
            arms=[a.strip() for a in arms.split(",")],
            pool=pool,
            concurrency=concurrency,
            trials=trials,
        )
    except SweepError as err:
        raise click.UsageError(str(err)) from None
    except ValidationError as err:
        raise click.UsageError("; ".join(f"--{e}" for e in format_errors(err))) from None


def _run_all(sweep: Sweep, out: Path, console: Console) -> list[str]:
    """Every derived experiment into `out/<directory>`, resuming what is recorded; the runs
    that failed for good, one line each."""
    progress = _SweepProgress(console, sweep.runs)
    failed = []
    try:
        for derived in sweep.experiments:
            store = DirectoryStore(out / derived.directory)
            progress.start(store, derived.directory)
            runner = ExperimentRunner(
                derived.experiment,
                VirtualCluster(out / derived.directory / "work"),
                store,
                progress,
            )
            try:
                result = asyncio.run(runner.run())
            except StoreMismatch as err:
                raise click.ClickException(
                    f"{err}\n(a different sweep was run into {out}: give another --out)"
                ) from None
            except SpecNotRunnable as err:
                raise click.ClickException(str(err)) from None
            failed += [f"  {derived.directory} {r.id}: {r.error_reason}" for r in result.failed]
    finally:
        progress.stop()
    return failed


def _points(sweep: Sweep, out: Path) -> list[SweepPoint]:
    """Every derived experiment's aggregate, read back from its results directory."""
    kv_tokens = {k.variant: k.tokens for k in sweep.kv_sizes}
    points: list[SweepPoint] = []
    for derived in sweep.experiments:
        store = DirectoryStore(out / derived.directory)
        store.load()
        points += sweep_points(derived.workers, store.aggregate(), sweep.arms, kv_tokens)
    return points


@click.command()
@experiment_argument
@click.option(
    "--workers",
    required=True,
    metavar="LIST",
    help="Worker counts, e.g. 2,4,6,8: one experiment (and results directory) each.",
)
@click.option(
    "--kv-tokens",
    metavar="LIST",
    help="KV cache per worker in tokens, e.g. 4k,9360,20k (k = 1024; rounded up to whole "
    "blocks, converted to kvCacheMemoryBytes with the model's KV bytes per token).",
)
@click.option(
    "--kv-bytes",
    metavar="LIST",
    help="KV cache per worker in bytes, e.g. 512Mi,1Gi,2Gi (default: the file's "
    "engine.kvCacheMemoryBytes).",
)
@click.option(
    "--prefixes",
    metavar="LIST",
    help="Distinct prefix counts, e.g. 2,6,12,24,48 (default: the file's).",
)
@click.option(
    "--arms",
    default=",".join(ARM_KINDS),
    show_default=True,
    metavar="LIST",
    help="service and/or affinity (prefix affinity, the bound of KV-aware routing); the file's "
    "arm of that kind is used where it has one. Router, Dynamo and external arms do not run "
    "in virtual time.",
)
@click.option(
    "--pool",
    metavar="NAME",
    help="With several worker pools: the one --workers scales; the others are left out.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    help="Requests in flight (default: the file's highest load.concurrency).",
)
@click.option(
    "--trials",
    type=click.IntRange(1, 100),
    help="Trials per point, the median reported (default: the file's load.trials).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 100),
    default=100 * DEFAULT_THRESHOLD,
    show_default=True,
    metavar="POINTS",
    help="Affinity pays where it gains at least this many points of request hit rate.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Sweep directory (default: results/<name>-sweep): w<N>/ per worker count, "
    "crossover.png, crossover.json, sweep.txt. The same command resumes it.",
)
@click.option("--dry-run", is_flag=True, help="Print the derived grid and run count only.")
def sweep(
    file: Path,
    workers: str,
    kv_tokens: str | None,
    kv_bytes: str | None,
    prefixes: str | None,
    arms: str,
    pool: str | None,
    concurrency: int | None,
    trials: int | None,
    threshold: float,
    out: Path | None,
    dry_run: bool,
) -> None:
    """Sweep FILE's experiment over worker counts, KV sizes and prefix counts in virtual time,
    and show where prefix affinity (what KV-aware routing can reach at best) stops paying
    over a plain Service: with few prefixes every worker holds them all, with many not even
    one worker's share fits."""
    request = _request(workers, kv_tokens, kv_bytes, prefixes, arms, pool, concurrency, trials)
    experiment = read_experiment(file)
    try:
        grid = derive_sweep(experiment, request)
    except SweepError as err:
        raise click.ClickException(str(err)) from None
    problems = virtual_problems(grid.experiments[0].experiment.spec)
    if problems:
        raise click.ClickException("not runnable in virtual time:\n" + "\n".join(problems))
    out = out or Path("results") / f"{experiment.metadata.name}-sweep"
    console = make_console()
    first = grid.experiments[0].experiment.spec
    console.print(
        f"sweep of {experiment.metadata.name}: workers {request.workers} x KV tokens "
        f"{[k.tokens for k in grid.kv_sizes]} x prefixes {first.workload.shared_prefix.prefixes} "
        f"x arms {list(grid.arms)}",
        soft_wrap=True,
    )
    console.print(
        f"concurrency {first.load.concurrency[0]}, {first.load.trials} trial(s): "
        f"{grid.runs} runs in virtual time",
        soft_wrap=True,
    )
    for note in grid.notes:
        console.print(f"note: {note}")
    if dry_run:
        return
    failed = _run_all(grid, out, console)
    fraction = threshold / 100
    curves = find_curves(_points(grid, out), fraction)
    console.export_text(clear=True)
    console.print(crossover_table(curves, fraction))
    for line in crossover_lines(curves):
        console.print(line)
    (out / "sweep.txt").write_text(console.export_text(clear=True))
    (out / "crossover.json").write_text(
        json.dumps(
            {
                "threshold": fraction,
                "experiments": {d.directory: d.experiment.metadata.name for d in grid.experiments},
                "curves": [c.model_dump(mode="json") for c in curves],
            },
            indent=1,
        )
    )
    plot = plot_crossover(curves, fraction, out / "crossover.png", experiment.metadata.name)
    for path in (out / "sweep.txt", out / "crossover.json", plot):
        if path is not None:
            console.print(f"written: {path}")
    console.print(f"each worker count's full report: kvbench report {out}/w<N>")
    if failed:
        raise click.ClickException(f"{len(failed)} runs failed:\n" + "\n".join(failed))
