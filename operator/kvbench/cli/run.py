"""`kvbench run FILE`: run a whole experiment on this machine, with simulated workers."""

import asyncio
from pathlib import Path

import click

from kvbench.cli.common import experiment_argument, make_console, read_experiment
from kvbench.cli.progress import RunProgress
from kvbench.cli.report import write_report
from kvbench.runner import ExperimentRunner, ResultsStore, StoreMismatch
from kvbench.runner.cluster.local.cluster import LocalCluster

__all__ = ["run"]


@click.command()
@experiment_argument
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory (default: results/<experiment name>). Run again with the same "
    "directory to resume an interrupted experiment.",
)
def run(file: Path, out: Path | None) -> None:
    """Run the experiment FILE locally: `kvbench sim` workers on loopback, the real load
    generator, and the report at the end."""
    experiment = read_experiment(file)
    out = out or Path("results") / experiment.metadata.name
    console = make_console()
    store = ResultsStore(out)
    progress = RunProgress(console)
    runner = ExperimentRunner(experiment, LocalCluster(out / "work"), store, progress)
    try:
        asyncio.run(runner.run())
    except StoreMismatch as err:
        raise click.ClickException(str(err)) from None
    except KeyboardInterrupt:
        progress.stop()
        console.print(f"interrupted: run `kvbench run {file} --out {out}` again to resume")
        raise SystemExit(130) from None
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    except (RuntimeError, TimeoutError) as err:
        progress.stop()
        details = "\n".join([str(err), *getattr(err, "__notes__", [])])
        raise click.ClickException(
            f"{details}\nthe finished runs are kept: fix the cause and run "
            f"`kvbench run {file} --out {out}` again to resume"
        ) from None
    finally:
        progress.stop()
    console.print(f"results: {out}")
    write_report(store, console)
