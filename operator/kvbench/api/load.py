"""The load: how hard, how often, warmed how, repeated how many times, seeded how."""

from typing import Annotated, Literal

from pydantic import Field, field_validator

from kvbench.api.base import ApiModel
from kvbench.api.units import Duration

__all__ = ["LoadSpec", "Warmup"]


class Warmup(ApiModel):
    """Requests sent before the measured window and left out of every figure."""

    requests_per_prefix: int = Field(
        1, ge=0, description="shared-prefix workloads: warm-up requests per prefix"
    )
    requests: int = Field(0, ge=0, description="other workloads: warm-up requests")


class LoadSpec(ApiModel):
    """Closed-loop concurrency points, or open-loop Poisson rates capped by concurrency."""

    concurrency: list[Annotated[int, Field(ge=1)]] = Field(
        ..., min_length=1, max_length=64, description="In-flight requests, one point each"
    )
    request_rates: list[Annotated[float, Field(gt=0)]] | None = Field(
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
    seed: int = Field(0, ge=0, description="Fixes the request sequence of every point and trial")
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
