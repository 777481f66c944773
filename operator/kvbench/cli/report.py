"""`kvbench report DIR` and `kvbench compare A B`: render recorded results again."""

from pathlib import Path

import click
from rich.console import Console

from kvbench.cli.common import make_console
from kvbench.report import compare_table, parse_side, render_report
from kvbench.runner import DirectoryStore, StoreMismatch

__all__ = ["compare", "report"]


def write_report(store: DirectoryStore, console: Console) -> None:
    """Print the report on a recording console, save it as report.txt, list the plots."""
    console.export_text(clear=True)
    plots = render_report(store, console, store.root)
    (store.root / "report.txt").write_text(console.export_text(clear=True))
    for plot in plots:
        console.print(f"plot: {plot}")


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(directory: Path) -> None:
    """Print the report of the results DIRECTORY (and write report.txt and plots there)."""
    store = DirectoryStore(directory)
    if not store.is_results_directory():
        raise click.ClickException(f"{directory}: not a kvbench results directory")
    try:
        store.load()
    except StoreMismatch as err:
        raise click.ClickException(str(err)) from None
    write_report(store, make_console())


@click.command()
@click.argument("a")
@click.argument("b")
def compare(a: str, b: str) -> None:
    """Put two results side by side: A and B are DIR (every arm) or DIR@ARM (one arm).

    Examples: `kvbench compare out@service out@affinity` (two arms of one experiment),
    `kvbench compare out-6-workers out-3-workers` (two experiments).
    """
    try:
        side_a, side_b = parse_side(a), parse_side(b)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    Console().print(compare_table(side_a, side_b))
