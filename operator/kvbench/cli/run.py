"""`kvbench run FILE`: run an experiment on this machine (for now: show what would run)."""

from pathlib import Path

import click
from rich.console import Console

from kvbench.cli.common import experiment_argument, read_experiment
from kvbench.cli.plan import print_plan
from kvbench.plan import plan_experiment

__all__ = ["run"]


@click.command()
@experiment_argument
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Results directory.")
def run(file: Path, out: Path | None) -> None:
    """Run the experiment FILE locally. The local runner is not built yet: print the plan."""
    console = Console()
    print_plan(plan_experiment(read_experiment(file)), console)
    console.print("[yellow]The local runner is not built yet: nothing was run.[/yellow]")
