"""The load: how hard, how often, warmed how, repeated how many times, seeded how."""

from typing import Annotated, Literal

from pydantic import Field, field_validator

from kvbench.api.base import MAX_INT, SpecModel
from kvbench.api.units import Duration

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_PREFIXES",
    "MAX_RATE",
    "MAX_REQUESTS",
    "LoadSpec",
    "Point",
    "Warmup",
]

MAX_CONCURRENCY = 4096
"""In-flight requests of one load generator: far beyond what a pool of servers batches."""
MAX_PREFIXES = 100_000
MAX_RATE = 100_000.0
"""Requests per second of one open-loop point."""
MAX_REQUESTS = 1_000_000
"""Requests of one point (measured or warm-up), and every count they are made from."""


class Point(SpecModel):
    """One workload point: the concurrency, and the prefix count or request rate if any."""

    concurrency: int = Field(..., ge=1, le=MAX_CONCURRENCY)
    prefixes: int | None = Field(None, ge=1, le=MAX_PREFIXES)
    request_rate: float | None = Field(None, gt=0, le=MAX_RATE)

    @property
    def key(self) -> str:
        """A short stable name, e.g. `p7-c8`, `c32`, `r2.5-c64`."""
        parts = []
        if self.prefixes is not None:
            parts.append(f"p{self.prefixes}")
        if self.request_rate is not None:
            parts.append(f"r{self.request_rate:g}")
        parts.append(f"c{self.concurrency}")
        return "-".join(parts)


class Warmup(SpecModel):
    """Requests sent before the measured window and left out of every figure."""

    requests_per_prefix: int = Field(
        1, ge=0, le=MAX_REQUESTS, description="shared-prefix workloads: warm-up requests per prefix"
    )
    requests: int = Field(0, ge=0, le=MAX_REQUESTS, description="other workloads: warm-up requests")


class LoadSpec(SpecModel):
    """Closed-loop concurrency points, or open-loop Poisson rates capped by concurrency."""

    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        ..., min_length=1, max_length=64, description="In-flight requests, one point each"
    )
    request_rates: list[Annotated[float, Field(gt=0, le=MAX_RATE)]] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Open loop: Poisson arrivals at each rate (req/s), in-flight capped by "
        "concurrency; one point per (rate, concurrency)",
    )
    warmup: Warmup = Field(default_factory=Warmup)
    trials: int = Field(
        3, ge=1, le=100, description="Repeats of every point; the median is reported"
    )
    seed: int = Field(
        0, ge=0, le=MAX_INT, description="Fixes the request sequence of every point and trial"
    )
    connection: Literal["new", "keep-alive"] = Field(
        "new",
        description="new: a new TCP connection per request, so a Service balances every "
        "request; keep-alive pins a client to one pod",
    )
    request_timeout: Duration = Field("10m", description="Per-request timeout (counted as error)")

    @field_validator("concurrency")
    @classmethod
    def _unique(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError(f"concurrency lists a value twice: {values}")
        return values
