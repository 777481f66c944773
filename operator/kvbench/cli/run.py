"""`kvbench run FILE`: run a whole experiment on this machine, with simulated workers."""

import asyncio
import os
from pathlib import Path

import click

from kvbench.cli.common import experiment_argument, make_console, read_experiment
from kvbench.cli.progress import RunProgress
from kvbench.cli.report import write_report
from kvbench.runner import DirectoryStore, ExperimentRunner, RunStage, RunState, StoreMismatch
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.runner.failures import SpecNotRunnable

__all__ = ["HOLD_ENV", "run"]

HOLD_ENV = "KVBENCH_HOLD_AT"
"""Fault injection for tests: the runner stops at this stage (writing `<out>/held`) and waits
to be killed."""


def _hold_at() -> RunStage | None:
    value = os.environ.get(HOLD_ENV)
    if not value:
        return None
    try:
        return RunStage(value)
    except ValueError:
        choices = ", ".join(s.value for s in RunStage)
        raise click.ClickException(f"{HOLD_ENV}={value}: not a run stage ({choices})") from None


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
    generator, and the report at the end.

    Interrupted (Ctrl-C, a crash, even kill -9), the same command resumes it: recorded runs
    are kept, a load generator still running is adopted, and only an unfinished run is run
    again. A failed run is tried again (execution.retries), then recorded as failed while the
    others go on; the command then exits 1.
    """
    experiment = read_experiment(file)
    out = out or Path("results") / experiment.metadata.name
    console = make_console()
    store = DirectoryStore(out)
    progress = RunProgress(console, store)

    hold_at = _hold_at()

    def hold(state: RunState) -> bool:
        if state.stage != hold_at:
            return False
        (out / "held").write_text(state.model_dump_json())
        return True

    runner = ExperimentRunner(
        experiment, LocalCluster(out / "work"), store, progress, hold if hold_at else None
    )
    again = f"`kvbench run {file} --out {out}`"
    try:
        result = asyncio.run(runner.run())
    except StoreMismatch as err:
        raise click.ClickException(str(err)) from None
    except SpecNotRunnable as err:
        raise click.ClickException(str(err)) from None
    except KeyboardInterrupt:
        progress.stop()
        console.print(f"interrupted: run {again} again to resume")
        raise SystemExit(130) from None
    finally:
        progress.stop()
    console.print(f"results: {out}")
    write_report(store, console, out)
    if result.failed:
        lines = [
            f"  {r.id}: {r.error_reason}: {(r.error or '').splitlines()[0]}" for r in result.failed
        ]
        raise click.ClickException(
            f"{len(result.failed)} of {len(runner.plan.runs)} runs failed (each after "
            f"{experiment.spec.execution.retries + 1} attempts):\n" + "\n".join(lines)
        )
