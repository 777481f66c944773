"""The held-out check that gives a prediction its error bar: fit on some measured runs,
predict the others, and see how far off the prediction is, figure by figure.

Runs are left out by group (a configuration: variant, arm and point, all its trials), so a
trial never helps predict its own repeat. Each fold's fit starts from the pools' profile,
never from the fit on all runs, which has seen the held-out runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from kvbench.api import BenchmarkExperiment
from kvbench.predict.figures import REPORTED, Figures, error_of
from kvbench.predict.fit import FitResult
from kvbench.predict.measured import MeasuredRun

__all__ = ["FigureError", "Fold", "Holdout", "folds_of", "held_out", "summarize"]

Fitter = Callable[[Sequence[MeasuredRun]], FitResult]
Predictor = Callable[[FitResult, Sequence[MeasuredRun]], list[Figures]]


class Fold(BaseModel):
    """One group left out: what the fit on the others predicted for its runs."""

    model_config = ConfigDict(frozen=True)

    held_out: str
    fitted_on: tuple[str, ...]
    constants: dict[str, float]
    runs: tuple[str, ...]
    predicted: tuple[Figures, ...]
    measured: tuple[Figures, ...]
    errors: tuple[dict[str, float | None], ...]


class FigureError(BaseModel):
    """A figure's held-out errors (relative; hit rates in points of 1) over every run left
    out; `bound` (the largest in magnitude) is the error bar a prediction is printed with."""

    model_config = ConfigDict(frozen=True)

    figure: str
    count: int
    mean_abs: float | None
    bound: float | None
    errors: tuple[float, ...]


class Holdout(BaseModel):
    """Every fold and the error per figure; `folds` empty when there is one group only."""

    model_config = ConfigDict(frozen=True)

    folds: tuple[Fold, ...]
    figures: dict[str, FigureError]


def folds_of(runs: Sequence[MeasuredRun]) -> list[tuple[str, list[MeasuredRun], list[MeasuredRun]]]:
    """(group, runs to fit on, runs held out) for every group, in the runs' order; none when
    there are fewer than two groups (nothing would be left to fit on)."""
    groups = list(dict.fromkeys(r.group for r in runs))
    if len(groups) < 2:
        return []
    return [
        (g, [r for r in runs if r.group != g], [r for r in runs if r.group == g]) for g in groups
    ]


def summarize(folds: Sequence[Fold]) -> dict[str, FigureError]:
    """The error per reported figure over every held-out run."""
    out = {}
    for name in REPORTED:
        errors = tuple(e[name] for fold in folds for e in fold.errors if e.get(name) is not None)
        values = [abs(e) for e in errors if e is not None]
        out[name] = FigureError(
            figure=name,
            count=len(values),
            mean_abs=sum(values) / len(values) if values else None,
            bound=max(values) if values else None,
            errors=tuple(e for e in errors if e is not None),
        )
    return out


def held_out(
    experiment: BenchmarkExperiment,
    runs: Sequence[MeasuredRun],
    fit: Fitter,
    predict: Predictor,
) -> Holdout:
    """Leave each group out in turn: `fit` on the rest, `predict` the group's runs."""
    folds = []
    for group, train, test in folds_of(runs):
        result = fit(train)
        predicted = predict(result, test)
        folds.append(
            Fold(
                held_out=group,
                fitted_on=result.fitted_on,
                constants=result.constants,
                runs=tuple(r.run.id for r in test),
                predicted=tuple(predicted),
                measured=tuple(r.figures for r in test),
                errors=tuple(
                    {n: error_of(n, p.get(n), r.figures.get(n)) for n in REPORTED}
                    for p, r in zip(predicted, test, strict=True)
                ),
            )
        )
    return Holdout(folds=tuple(folds), figures=summarize(folds))
