"""`kvbench report`, `kvbench compare` and `kvbench fetch`: render recorded results again,
from a results directory or from an experiment on the cluster (`bx/NAME`)."""

from pathlib import Path

import click
from rich.console import Console

from kvbench.cli.common import make_console
from kvbench.cli.sources import open_results
from kvbench.report import compare_table, render_report, side_of
from kvbench.runner import DirectoryStore, RunStore

__all__ = ["compare", "fetch", "report", "write_report"]

_NAMESPACE = click.option("--namespace", "-n", help="Namespace of bx/NAME (default: context's)")


def write_report(store: RunStore, console: Console, out: Path) -> None:
    """Print the report on a recording console, save it as report.txt in `out`, list the
    plots written there."""
    out.mkdir(parents=True, exist_ok=True)
    console.export_text(clear=True)
    plots = render_report(store, console, out)
    (out / "report.txt").write_text(console.export_text(clear=True))
    for plot in plots:
        console.print(f"plot: {plot}")


@click.command()
@click.argument("source")
@_NAMESPACE
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where report.txt and the plots go (default: the results directory, or ./NAME)",
)
def report(source: str, namespace: str | None, out: Path | None) -> None:
    """Print the report of SOURCE: a results directory, or bx/NAME on the cluster."""
    store = open_results(source, namespace)
    if out is None:
        out = store.root if isinstance(store, DirectoryStore) else Path(source.split("/")[-1])
    write_report(store, make_console(), out)


@click.command()
@click.argument("a")
@click.argument("b")
@_NAMESPACE
def compare(a: str, b: str, namespace: str | None) -> None:
    """Put two results side by side: A and B are DIR or bx/NAME (every arm), or DIR@ARM,
    bx/NAME@ARM (one arm).

    Examples: `kvbench compare out@service out@affinity` (two arms of one experiment),
    `kvbench compare bx/six-workers bx/three-workers` (two experiments).
    """
    sides = []
    for text in (a, b):
        source, _, arm = text.partition("@")
        try:
            sides.append(side_of(text, open_results(source, namespace), arm or None))
        except ValueError as err:
            raise click.ClickException(str(err)) from None
    Console().print(compare_table(*sides))


@click.command()
@click.argument("source")
@_NAMESPACE
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
def fetch(source: str, namespace: str | None, out: Path) -> None:
    """Write the results of bx/NAME (or another results directory) into the results
    directory OUT: the spec, every run's state, record and raw results, the aggregate."""
    store = open_results(source, namespace)
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} is not empty")
    target = DirectoryStore(out)
    target.open(store.experiment())
    for state in store.states().values():
        target.save_state(state)
    for record in store.records():
        if record.raw_results:
            names = store.states()[record.index].names.model_copy(
                update={"attempt": record.attempt}
            )
            where = target.save_raw(names, store.read_raw(record.raw_results))
            record = record.model_copy(update={"raw_results": where})
        target.save_run(record)
    target.save_aggregate(store.aggregate())
    click.echo(f"{len(store.records())} runs written to {out}")
