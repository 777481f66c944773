"""Helpers the commands share: reading an experiment file with readable errors."""

from pathlib import Path

import click
from rich.console import Console

from kvbench.api import BenchmarkExperiment, SpecError, load_experiment

__all__ = ["experiment_argument", "make_console", "read_experiment"]

experiment_argument = click.argument(
    "file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)


def read_experiment(path: Path) -> BenchmarkExperiment:
    """The validated experiment, or a clean CLI error listing every problem with its field."""
    try:
        return load_experiment(path)
    except SpecError as err:
        raise click.ClickException(str(err)) from None


def make_console() -> Console:
    """A recording console (reports are saved as text too), wide when not on a terminal so
    that tables in logs and files are not folded."""
    console = Console(record=True)
    if not console.is_terminal:
        console = Console(record=True, width=160)
    return console
