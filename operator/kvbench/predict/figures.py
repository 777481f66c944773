"""The figures a prediction is judged on, read the same way from a measured run's record and
from a virtual replay's summary, and how far a predicted figure is from a measured one.

Latency and throughput figures are compared as relative errors (a profile scales them); hit
rates as differences in points (a share near zero has no useful relative error)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kvbench.api.status import RunSummary

__all__ = ["FITTED", "HIT_RATES", "REPORTED", "Figures", "error_of", "figures_of"]

FITTED = (
    "ttft_p50",
    "ttft_p90",
    "ttft_hit_p50",
    "ttft_miss_p50",
    "itl_p50",
    "output_tokens_per_second",
)
"""The figures the fit matches: they depend on the step costs and the frontend latency."""

HIT_RATES = ("request_hit_rate", "token_hit_rate")
"""Decided by routing and cache size, hardly by timing: predicted, never fitted."""

REPORTED = ("ttft_p50", "ttft_p90", "itl_p50", "output_tokens_per_second", *HIT_RATES)
"""The figures whose held-out error is the prediction's error bar."""

LABELS = {
    "ttft_p50": "TTFT p50",
    "ttft_p90": "TTFT p90",
    "ttft_hit_p50": "TTFT hit p50",
    "ttft_miss_p50": "TTFT miss p50",
    "itl_p50": "ITL p50",
    "output_tokens_per_second": "output tok/s",
    "request_hit_rate": "request hit rate",
    "token_hit_rate": "token hit rate",
}


class Figures(BaseModel):
    """One run's figures (seconds, tokens/s, shares); None where the run has none (say, no
    misses under prefix affinity)."""

    model_config = ConfigDict(frozen=True)

    ttft_p50: float | None = None
    ttft_p90: float | None = None
    ttft_hit_p50: float | None = None
    ttft_miss_p50: float | None = None
    itl_p50: float | None = None
    output_tokens_per_second: float | None = None
    request_hit_rate: float | None = None
    token_hit_rate: float | None = None

    def get(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


def figures_of(summary: RunSummary) -> Figures:
    """A run record's figures (measured or replayed: the same RunSummary fields)."""
    return Figures(**{name: getattr(summary, name) for name in Figures.model_fields})


def error_of(name: str, predicted: float | None, measured: float | None) -> float | None:
    """Predicted vs measured: relative for times and rates, in points (of 1) for hit rates;
    None where either is missing or a relative error is undefined."""
    if predicted is None or measured is None:
        return None
    if name in HIT_RATES:
        return predicted - measured
    if measured <= 0:
        return None
    return (predicted - measured) / measured
