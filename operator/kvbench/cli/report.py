"""`kvbench report`, `kvbench compare` and `kvbench fetch`: render recorded results again,
from a results directory or from an experiment on the cluster (`bx/NAME`)."""

from pathlib import Path

import click
from rich.console import Console

from kvbench.cli.common import make_console
from kvbench.cli.sources import open_results
from kvbench.report import compare_table, compare_warnings, render_report, side_of
from kvbench.report.html import write_html
from kvbench.report.references import (
    REPRODUCES,
    Reference,
    ReferenceError,
    default_reference_dirs,
    find_reference,
    load_reference,
)
from kvbench.runner import DirectoryStore, RunStore

__all__ = ["compare", "fetch", "report", "write_report"]

_NAMESPACE = click.option("--namespace", "-n", help="Namespace of bx/NAME (default: context's)")


_REFERENCE = click.option(
    "--reference",
    help="The published measurement to set beside the results: an ID looked up in "
    "examples/references, or a YAML file (default: the experiment's kvbench.io/reproduces "
    "annotation)",
)


def _reference(store: RunStore, console: Console, name: str | None) -> Reference | None:
    """The reference `name` names, else the experiment's annotation; None (said on the
    console) when it cannot be read."""
    name = name or store.experiment().metadata.annotations.get(REPRODUCES)
    if not name:
        return None
    try:
        return load_reference(find_reference(name, default_reference_dirs()))
    except ReferenceError as err:
        console.print(f"[yellow]No published figures:[/yellow] {err}")
        return None


def write_report(
    store: RunStore, console: Console, out: Path, reference: str | None = None
) -> None:
    """Print the report on a recording console, save it in `out` as report.txt and as the
    self-contained report.html beside the plots, list what was written. `reference`: the
    published measurement (ID or file) the experiment reproduces, when its store does not
    say."""
    out.mkdir(parents=True, exist_ok=True)
    console.export_text(clear=True)
    found = _reference(store, console, reference)
    plots = render_report(store, console, out, found)
    page = write_html(console, f"kvbench report: {store.experiment().metadata.name}", plots,
                      out / "report.html")  # fmt: skip
    (out / "report.txt").write_text(console.export_text(clear=True))
    for path in [*plots, page]:
        console.print(f"written: {path}")


@click.command()
@click.argument("source")
@_NAMESPACE
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where report.txt, report.html and the plots go (default: the results directory, "
    "or ./NAME)",
)
@_REFERENCE
def report(source: str, namespace: str | None, out: Path | None, reference: str | None) -> None:
    """Print the report of SOURCE: a results directory, or bx/NAME on the cluster."""
    store = open_results(source, namespace)
    if out is None:
        out = store.root if isinstance(store, DirectoryStore) else Path(source.split("/")[-1])
    write_report(store, make_console(), out, reference)


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
    console = make_console()
    console.print(compare_table(*sides))
    for warning in compare_warnings(*sides):
        console.print(f"[yellow]warning:[/yellow] {warning}")


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
