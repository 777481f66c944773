"""`kvbench trace`: make a small Mooncake trace, and put a trace into a ConfigMap for a
cluster (`workload.trace.configMap`)."""

import sys
from pathlib import Path

import click
import yaml

from kvbench.kube.trace import trace_configmap
from kvbench.loadgen.workload.mooncake import TraceError
from kvbench.loadgen.workload.synthetic_trace import TraceShape, synthetic_trace, trace_lines

__all__ = ["trace"]


class _Literal(yaml.SafeDumper):
    """Writes the trace's lines as block literals (`|`), one row per line, as in the file."""


_Literal.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)


@click.group()
def trace() -> None:
    """Mooncake traces for `workload.trace`."""


@trace.command()
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--rows", type=click.IntRange(1, 100_000), default=200, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0.001), default=4.0, show_default=True,
              help="Mean arrivals per second (Poisson).")  # fmt: skip
@click.option("--seed", type=int, default=2026, show_default=True)
def make(out: Path, rows: int, rate: float, seed: int) -> None:
    """Write a synthetic Mooncake trace to OUT: shared system prompts, conversations whose
    turns extend earlier hash-id chains, Poisson arrivals (docs/workloads.md)."""
    out.write_text(trace_lines(synthetic_trace(TraceShape(rows=rows, rate=rate), seed)))


@trace.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="The ConfigMap's name (trace.configMap.name).")
@click.option("--namespace", help="The experiment's namespace (default: none written).")
def configmap(file: Path, name: str, namespace: str | None) -> None:
    """Print the ConfigMap that holds the trace FILE (at most 1 MiB), for `kubectl create -f -`
    (or `kubectl apply --server-side`: a client-side apply keeps a copy of the object in an
    annotation, which holds at most 256 KiB)."""
    try:
        manifest = trace_configmap(file.read_bytes(), name, namespace)
    except TraceError as err:
        raise click.ClickException(f"{file}: {err}") from None
    yaml.dump(manifest, sys.stdout, Dumper=_Literal, sort_keys=False, width=1 << 30)
