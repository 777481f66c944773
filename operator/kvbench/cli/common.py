"""Helpers the commands share: reading an experiment file (and a trace workload's trace) with
readable errors, a console that never cuts a table."""

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from kvbench.api import BenchmarkExperiment, SpecError, load_experiment
from kvbench.loadgen.workload.mooncake import Trace, TraceError
from kvbench.loadgen.workload.trace_source import load_trace

__all__ = ["experiment_argument", "make_console", "read_experiment", "read_trace"]

_PIPE_WIDTH = 160
_UNBOUNDED = 1 << 16

experiment_argument = click.argument(
    "file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)


def read_experiment(path: Path) -> BenchmarkExperiment:
    """The validated experiment, or a clean CLI error listing every problem with its field."""
    try:
        return load_experiment(path)
    except SpecError as err:
        raise click.ClickException(str(err)) from None


def read_trace(experiment: BenchmarkExperiment, given: Path | None = None) -> Trace | None:
    """A trace workload's trace: `trace.file`, or `given` (a local copy of a ConfigMap's
    trace, for `kvbench plan`); a clean CLI error naming the row when it cannot be replayed."""
    spec = experiment.spec.workload.trace
    if spec is None:
        return None
    path = given or (Path(spec.file) if spec.file is not None else None)
    if path is None:
        raise click.ClickException(
            "spec.workload.trace.configMap: a ConfigMap is read on a cluster (the operator); "
            "here give the trace as trace.file"
        )
    try:
        return load_trace(spec, path)
    except TraceError as err:
        raise click.ClickException(str(err)) from None


class _UncutConsole(Console):
    """A console for pipes and files: 160 columns, and as many as a wider table needs. A pipe
    has no right edge, and at a fixed width rich would cut the cells of a wide table to
    `…`, losing figures from logs and from report.txt."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        page = self.width
        unbounded = self.options.update_width(_UNBOUNDED)
        needed = max(
            (Measurement.get(self, unbounded, o).maximum for o in objects if isinstance(o, Table)),
            default=0,
        )
        self.width = max(page, needed)
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = page


def make_console() -> Console:
    """A recording console (reports are saved as text too); off a terminal, one that never
    folds or cuts a table (`_UncutConsole`)."""
    console = Console(record=True)
    if not console.is_terminal:
        console = _UncutConsole(record=True, width=_PIPE_WIDTH)
    return console
