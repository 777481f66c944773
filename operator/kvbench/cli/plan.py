"""`kvbench plan FILE`: the ordered runs of an experiment, with counts and a duration estimate."""

from collections import Counter
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from kvbench.cli.common import experiment_argument, make_console, read_experiment, read_trace
from kvbench.plan import Plan, plan_experiment

__all__ = ["plan", "print_plan"]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def print_plan(plan: Plan, console: Console) -> None:
    """The plan as a table, then its counts."""
    table = Table(title=f"Plan of {plan.experiment}")
    for column in ("#", "run", "variant", "arm", "point", "trial", "warm-up", "measured", "est."):
        table.add_column(
            column, justify="right" if column in ("#", "warm-up", "measured") else "left"
        )
    for run in plan.runs:
        table.add_row(
            str(run.index),
            run.id,
            run.variant,
            f"{run.arm} ({run.arm_kind})",
            run.point.key,
            str(run.trial),
            str(run.warmup_requests),
            str(run.measured_requests),
            _duration(run.estimated_seconds),
        )
    console.print(table)
    variants = Counter(r.variant for r in plan.runs)
    arms = Counter(r.arm for r in plan.runs)
    console.print(
        f"{len(plan.runs)} runs ({len(variants)} variants x {len(arms)} arms x "
        f"{len({r.point.key for r in plan.runs})} points x {max(r.trial for r in plan.runs)} "
        f"trials), {plan.total_requests} requests, about {_duration(plan.estimated_seconds)} "
        f"on a GPU cluster, about {_duration(plan.estimated_local_seconds)} with `kvbench run`"
    )


@click.command()
@experiment_argument
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A trace workload's trace, instead of trace.file (a copy of trace.configMap's).",
)
def plan(file: Path, as_json: bool, trace_file: Path | None) -> None:
    """Print the ordered runs of an experiment FILE."""
    experiment = read_experiment(file)
    trace = read_trace(experiment, trace_file)
    result = plan_experiment(experiment, trace=trace.info if trace else None)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        print_plan(result, make_console())
