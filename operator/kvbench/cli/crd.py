"""`kvbench crd`: print (or write) the CRD generated from the API models."""

from pathlib import Path

import click

from kvbench.api.crd import crd_yaml

__all__ = ["crd"]


@click.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of standard output.",
)
def crd(output: Path | None) -> None:
    """Print the BenchmarkExperiment CustomResourceDefinition."""
    text = crd_yaml()
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
