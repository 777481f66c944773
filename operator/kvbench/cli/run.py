"""`kvbench run FILE`: run a whole experiment on this machine, with simulated workers (or real
vLLM ones on a GPU machine: `--engine vllm`)."""

import asyncio
import os
import shlex
from pathlib import Path

import click
from pydantic import ValidationError

from kvbench.cli.common import experiment_argument, make_console, read_experiment, read_trace
from kvbench.cli.error_rates import DEFAULT_MAX_ERROR_RATE, too_many_errors
from kvbench.cli.progress import RunProgress
from kvbench.cli.report import write_report
from kvbench.runner import DirectoryStore, ExperimentRunner, RunStage, RunState, StoreMismatch
from kvbench.runner.cluster.local.cluster import LocalCluster
from kvbench.runner.cluster.local.launcher import WorkerLauncher
from kvbench.runner.cluster.local.sim_workers import SimLauncher
from kvbench.runner.cluster.local.vllm_workers import VllmLauncher, VllmOptions
from kvbench.runner.cluster.virtual.cluster import VirtualCluster, in_virtual_time
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


_OPTIONS = {
    "command": "--vllm-command",
    "gpus": "--gpus",
    "model_dir": "--model-dir",
    "extra_args": "--vllm-arg",
}
"""VllmOptions field -> the option that sets it, for errors."""


def _launcher(
    engine: str,
    vllm_command: str | None,
    gpus: str | None,
    model_dir: Path | None,
    vllm_args: tuple[str, ...],
) -> WorkerLauncher:
    """The workers `--engine` names, with the options of real vLLM (refused for the sim)."""
    given = [
        name
        for name, value in (
            ("--vllm-command", vllm_command),
            ("--gpus", gpus),
            ("--model-dir", model_dir),
            ("--vllm-arg", vllm_args),
        )
        if value
    ]
    if engine == "sim":
        if given:
            raise click.UsageError(f"{', '.join(given)}: only with --engine vllm")
        return SimLauncher()
    try:
        options = VllmOptions(
            command=shlex.split(vllm_command) if vllm_command is not None else None,
            gpus=[g.strip() for g in gpus.split(",")] if gpus is not None else None,
            model_dir=model_dir,
            extra_args=list(vllm_args),
        )
    except ValidationError as err:
        problems = "; ".join(f"{_OPTIONS[str(e['loc'][0])]}: {e['msg']}" for e in err.errors())
        raise click.UsageError(problems) from None
    return VllmLauncher(options)


@click.command()
@experiment_argument
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory (default: results/<experiment name>). Run again with the same "
    "directory to resume an interrupted experiment.",
)
@click.option(
    "--engine",
    type=click.Choice(["sim", "vllm"]),
    default="sim",
    show_default=True,
    help="The workers: `kvbench sim`, or real `vllm serve` (a GPU machine with vLLM).",
)
@click.option(
    "--vllm-command",
    metavar="COMMAND",
    help="The vLLM server's command, before its arguments (default: `python -m "
    "vllm.entrypoints.cli.main serve` of this Python when it has vLLM, else `vllm serve`).",
)
@click.option(
    "--gpus",
    metavar="LIST",
    help="CUDA_VISIBLE_DEVICES of the vLLM workers: `0` puts all on GPU 0, `0,1` alternates "
    "them (default: inherited).",
)
@click.option(
    "--model-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="vLLM serves DIR/<last part of engine.model> under the model's name (a machine "
    "without the Hugging Face Hub).",
)
@click.option(
    "--vllm-arg",
    "vllm_args",
    multiple=True,
    metavar="ARG",
    help="One more `vllm serve` argument of this machine, e.g. --vllm-arg=--load-format=dummy "
    "(repeatable; never a flag the experiment sets).",
)
@click.option(
    "--virtual",
    is_flag=True,
    help="Virtual time (as spec.simulator.mode: virtual): simulated workers, the arm and the "
    "clients in one discrete-event simulation, no processes or sockets; the same records on "
    "any machine.",
)
@click.option(
    "--max-error-rate",
    type=click.FloatRange(0, 1),
    default=DEFAULT_MAX_ERROR_RATE,
    show_default=True,
    metavar="SHARE",
    help="Exit 1 when a run failed more than this share of its measured requests, naming "
    "its commonest error (0: any failed request).",
)
def run(
    file: Path,
    out: Path | None,
    engine: str,
    vllm_command: str | None,
    gpus: str | None,
    model_dir: Path | None,
    vllm_args: tuple[str, ...],
    virtual: bool,
    max_error_rate: float,
) -> None:
    """Run the experiment FILE locally: `kvbench sim` workers on loopback (or real vLLM ones
    with --engine vllm, on the wall clock), the real load generator, and the report at the end.

    Interrupted (Ctrl-C, a crash, even kill -9), the same command resumes it: recorded runs
    are kept, a load generator still running is adopted, and only an unfinished run is run
    again. A failed run is tried again (execution.retries), then recorded as failed while the
    others go on; the command then exits 1, as it does when a run failed more than
    --max-error-rate of its requests.
    """
    launcher = _launcher(engine, vllm_command, gpus, model_dir, vllm_args)
    experiment = read_experiment(file)
    trace = read_trace(experiment)
    out = out or Path("results") / experiment.metadata.name
    if virtual:
        experiment = in_virtual_time(experiment)
    virtual = experiment.spec.simulator.mode == "virtual"
    if virtual and engine != "sim":
        raise click.UsageError(f"--engine {engine}: virtual time simulates its workers")
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
        experiment,
        VirtualCluster(out / "work")
        if virtual
        else LocalCluster(out / "work", launcher=launcher),
        store,
        progress,
        hold if hold_at else None,
        trace,
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
    problems = []
    if result.failed:
        lines = [
            f"  {r.id}: {r.error_reason}: {(r.error or '').splitlines()[0]}" for r in result.failed
        ]
        problems.append(
            f"{len(result.failed)} of {len(runner.plan.runs)} runs failed (each after "
            f"{experiment.spec.execution.retries + 1} attempts):\n" + "\n".join(lines)
        )
    erring = too_many_errors(store, result.records, max_error_rate)
    if erring:
        problems.append(
            f"{len(erring)} of {len(runner.plan.runs)} runs failed more than "
            f"{max_error_rate:.0%} of their requests:\n" + "\n".join(erring)
        )
    if problems:
        raise click.ClickException("\n".join(problems))
