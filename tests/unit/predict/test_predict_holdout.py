"""The held-out split and its error per figure, with a fake fit and prediction (no replays)."""

from __future__ import annotations

import math

import pytest

from kvbench.api import Point
from kvbench.plan import PlannedRun
from kvbench.predict.figures import Figures, error_of
from kvbench.predict.fit import FitResult
from kvbench.predict.holdout import Fold, folds_of, held_out, summarize
from kvbench.predict.measured import MeasuredRun
from kvbench.sim.timing import resolve_profile


def _run(arm: str, prefixes: int, trial: int, ttft: float, hit: float = 0.5) -> MeasuredRun:
    point = Point(prefixes=prefixes, concurrency=8)
    return MeasuredRun(
        run=PlannedRun(
            index=0,
            id=f"default.{arm}.{point.key}.t{trial}",
            variant="default",
            arm=arm,
            arm_kind="service",
            point=point,
            trial=trial,
            seed=1,
            warmup_requests=0,
            measured_requests=10,
            estimated_seconds=1.0,
            estimated_local_seconds=1.0,
        ),
        figures=Figures(ttft_p50=ttft, ttft_p90=2 * ttft, request_hit_rate=hit),
    )


def test_trials_of_one_configuration_are_held_out_together() -> None:
    """Catches a split by run instead of by configuration: a trial's repeat would sit in the
    fit that predicts it, and the error bar would come out too small."""
    runs = [_run("service", 2, 1, 0.1), _run("service", 2, 2, 0.1), _run("service", 7, 1, 0.2)]
    folds = folds_of(runs)
    assert [g for g, _, _ in folds] == ["default.service.p2-c8", "default.service.p7-c8"]
    _, train, test = folds[0]
    assert [r.run.trial for r in test] == [1, 2]
    assert {r.group for r in train} == {"default.service.p7-c8"}


def test_one_configuration_gives_no_folds() -> None:
    """Catches a fold that fits on nothing (a crash, or a bar from an unfitted profile)."""
    assert folds_of([_run("service", 2, 1, 0.1), _run("service", 2, 2, 0.1)]) == []


def test_error_is_relative_for_times_and_in_points_for_hit_rates() -> None:
    """Catches hit rates compared relatively (a 2 % share predicted as 4 % is not +100 %
    off in any useful sense) and a relative error divided by the prediction."""
    assert error_of("ttft_p50", 0.12, 0.10) == pytest.approx(0.2)
    assert error_of("request_hit_rate", 0.30, 0.25) == pytest.approx(0.05)
    assert error_of("ttft_p50", None, 0.1) is None
    assert error_of("ttft_p50", 0.1, 0.0) is None


def test_held_out_never_fits_on_the_run_it_predicts() -> None:
    """Catches a leak: the fold's fit seeing the held-out run; and a wrong error bar (the
    largest |error| over every held-out run, per figure)."""
    runs = [_run("service", 2, 1, 0.10), _run("affinity", 2, 1, 0.20), _run("service", 7, 1, 0.40)]
    seen: list[set[str]] = []

    def fit(train):
        seen.append({r.run.id for r in train})
        profile = resolve_profile("roofline:h200")
        return FitResult(
            profile=profile,
            start={},
            constants={},
            fitted_on=tuple(r.run.id for r in train),
            replays=0,
            rms_log_error=0.0,
        )

    def predict(result, test):
        # every prediction 10 % high on TTFT p50, hit rate 0.1 low
        return [
            Figures(
                ttft_p50=1.1 * r.figures.ttft_p50, request_hit_rate=r.figures.request_hit_rate - 0.1
            )
            for r in test
        ]

    check = held_out(None, runs, fit, predict)  # type: ignore[arg-type]
    assert len(check.folds) == 3
    for fold, fitted_on in zip(check.folds, seen, strict=True):
        assert not set(fold.runs) & fitted_on
    ttft = check.figures["ttft_p50"]
    assert ttft.count == 3
    assert ttft.bound == pytest.approx(0.1)
    assert check.figures["request_hit_rate"].bound == pytest.approx(0.1)
    assert check.figures["ttft_p90"].count == 0 and check.figures["ttft_p90"].bound is None


def test_summarize_bound_is_largest_magnitude() -> None:
    """Catches a bar taken as the largest signed error (an under-prediction would vanish)."""
    fold = Fold(
        held_out="g",
        fitted_on=(),
        constants={},
        runs=("a", "b"),
        predicted=(Figures(), Figures()),
        measured=(Figures(), Figures()),
        errors=({"ttft_p50": -0.3}, {"ttft_p50": 0.1}),
    )
    ttft = summarize([fold])["ttft_p50"]
    assert ttft.bound == pytest.approx(0.3)
    assert ttft.mean_abs == pytest.approx(0.2)
    assert not math.isnan(ttft.mean_abs)
