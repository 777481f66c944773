"""`kvbench predict MEASURED --layout FILE`: fit the timing profile to runs measured on real
vLLM, check the fit on held-out runs, and predict another layout in virtual time with the
held-out error as each figure's error bar."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import click
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from kvbench.cli.common import make_console, read_experiment, read_trace
from kvbench.predict.figures import HIT_RATES, LABELS, REPORTED, Figures
from kvbench.predict.fit import (
    FREE,
    FitResult,
    ParallelReplayer,
    Replayer,
    base_profile,
    fit_profile,
    replay_serial,
)
from kvbench.predict.holdout import FigureError, Holdout, held_out
from kvbench.predict.layout import LayoutError, Predicted, predict_layout
from kvbench.predict.measured import MeasuredError, MeasuredRun, load_measured
from kvbench.runner import StoreMismatch
from kvbench.runner.cluster.virtual.preflight import virtual_problems

__all__ = ["Prediction", "predict"]


class Prediction(BaseModel):
    """What `kvbench predict` found, as `prediction.json` keeps it."""

    measured: str
    layout: str
    fit: FitResult
    holdout: Holdout
    predictions: list[Predicted]


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name in HIT_RATES:
        return f"{100 * value:.1f} %"
    if name == "output_tokens_per_second":
        return f"{value:,.0f}"
    return f"{1000 * value:.1f} ms"


def _bar(name: str, error: FigureError | None) -> str:
    if error is None or error.bound is None:
        return ""
    if name in HIT_RATES:
        return f" ± {100 * error.bound:.1f} pt"
    return f" ± {100 * error.bound:.0f} %"


def _error(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f} pt" if name in HIT_RATES else f"{100 * value:+.1f} %"


def _print_fit(console: Console, fit: FitResult) -> None:
    table = Table(title=f"Fitted on {len(fit.fitted_on)} runs ({fit.replays} replays)")
    for column in ("constant", "start", "fitted", "what it prices"):
        table.add_column(column, justify="left" if column[0] in "cw" else "right")
    for name, why in FREE.items():
        table.add_row(name, f"{fit.start[name]:.4g}", f"{fit.constants[name]:.4g}", why)
    console.print(table)
    console.print(
        f"fit on its own runs: rms log(replayed / measured) {fit.rms_log_error:.3f} "
        f"(about {100 * fit.rms_log_error:.0f} %)"
    )


def _print_holdout(console: Console, holdout: Holdout) -> None:
    if not holdout.folds:
        console.print(
            "held-out check: one measured configuration only, nothing to hold out: "
            "the predictions below have no error bar"
        )
        return
    table = Table(title="Held-out check: each configuration predicted by a fit on the others")
    table.add_column("held out")
    for name in REPORTED:
        table.add_column(LABELS[name], justify="right")
    for fold in holdout.folds:
        for run, errors in zip(fold.runs, fold.errors, strict=True):
            table.add_row(run, *(_error(n, errors.get(n)) for n in REPORTED))
    table.add_row("mean |error|", *(_error(n, holdout.figures[n].mean_abs) for n in REPORTED))
    table.add_row("max |error| (bar)", *(_error(n, holdout.figures[n].bound) for n in REPORTED))
    console.print(table)
    console.print("errors: (predicted - measured) / measured; hit rates in points")


def _print_predictions(
    console: Console, title: str, runs: Sequence[Predicted], bars: dict[str, FigureError]
) -> None:
    table = Table(title=title)
    table.add_column("run")
    for name in REPORTED:
        table.add_column(LABELS[name], justify="right")
    for run in runs:
        if run.error:
            table.add_row(run.id, *(["failed"] + [""] * (len(REPORTED) - 1)))
            continue
        cells = [_value(n, run.figures.get(n)) + _bar(n, bars.get(n)) for n in REPORTED]
        table.add_row(run.id, *cells)
    console.print(table)


def _fresh_out(out: Path | None, stack: ExitStack) -> Path:
    if out is None:
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kvbench-predict-")))
    if out.exists() and any(out.iterdir()):
        raise click.UsageError(f"--out {out}: not empty (a prediction is never resumed)")
    return out


@click.command()
@click.argument("measured", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--layout",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The experiment to predict (workers, KV size, Service or affinity arms, workload).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the layout's virtual results directory and prediction.json here (new or "
    "empty; default: a temporary directory).",
)
@click.option(
    "--budget",
    type=click.IntRange(1),
    default=25,
    show_default=True,
    help="Evaluations per fit (each replays every run it fits on, ~1-3 s each).",
)
@click.option(
    "--holdout/--no-holdout",
    default=True,
    show_default=True,
    help="Leave each measured configuration out in turn to get the error bars.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Processes replaying at once.",
)
def predict(
    measured: Path, layout: Path, out: Path | None, budget: int, holdout: bool, jobs: int
) -> None:
    """Fit the timing profile to the runs of results directory MEASURED (real vLLM) that
    virtual time can replay (Service and affinity arms), check the fit by leaving each
    configuration out, then run --layout in virtual time with the fitted profile and print
    its figures ± the largest held-out error of each."""
    console = make_console()
    try:
        data = load_measured(measured)
        base = base_profile(data.experiment)
    except (MeasuredError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    target = read_experiment(layout)
    trace = read_trace(target)
    problems = virtual_problems(target.spec)
    if problems:  # before the fit: minutes of replays for a layout that cannot run
        raise click.ClickException(
            f"--layout {layout}: cannot run in virtual time:\n"
            + "\n".join(f"  {p}" for p in problems)
        )
    console.print(
        f"measured: {measured}: {len(data.runs)} runs replayable "
        f"({', '.join(r.run.id for r in data.runs)}); starting profile {base.name}"
    )
    for line in data.skipped:
        console.print(f"  left out: {line}")
    models = {e.model for e in data.experiment.spec.engines().values()}
    if not models >= {e.model for e in target.spec.engines().values()}:
        console.print(
            f"note: the layout's model is not the measured one ({', '.join(models)}): "
            "the fitted constants are carried over by the model's geometry only"
        )
    with ExitStack() as stack:
        where = _fresh_out(out, stack)
        replayer: Replayer = replay_serial
        if jobs > 1:
            replayer = ParallelReplayer(stack.enter_context(ProcessPoolExecutor(jobs)))
        name = f"fitted:{data.experiment.metadata.name}"

        def fit(runs: Sequence[MeasuredRun]) -> FitResult:
            return fit_profile(
                data.experiment, runs, base, budget=budget, replayer=replayer, name=name
            )

        def replayed(result: FitResult, runs: Sequence[MeasuredRun]) -> list[Figures]:
            return replayer(data.experiment, [(r.run, result.profile) for r in runs])

        checked = held_out(data.experiment, data.runs if holdout else [], fit, replayed)
        fitted = fit(data.runs)
        _print_fit(console, fitted)
        _print_holdout(console, checked)
        try:
            predicted = predict_layout(target, fitted.profile, where / "layout", trace)
        except (LayoutError, StoreMismatch) as err:
            raise click.ClickException(f"--layout {layout}: {err}") from None
        _print_predictions(
            console,
            f"Prediction: {target.metadata.name} in virtual time, profile {name} "
            "(± the largest held-out error)",
            predicted,
            checked.figures,
        )
        prediction = Prediction(
            measured=str(measured),
            layout=str(layout),
            fit=fitted,
            holdout=checked,
            predictions=predicted,
        )
        (where / "prediction.json").write_text(prediction.model_dump_json(indent=1))
        if out is not None:
            console.print(f"results: {where / 'layout'}, {where / 'prediction.json'}")
