"""The articles' published figures (``figures.yaml``), and real vLLM's on an H200 as this
project measured them (``bench/results/``): one table for the tests and the bench.

Which figures a timing profile was fitted on is the profile's data (``fitted_on`` in
``sim/timing.py``); every other figure is a prediction whose tolerance the table states
before the simulator runs. Values here are measured ones, never the simulator's.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from kvbench.sim.timing import resolve_profile

__all__ = ["Figure", "load_figures"]

_TABLE = Path(__file__).with_name("figures.yaml")


class Figure(BaseModel):
    """One published figure, its two-sided tolerance, and the profile it was measured on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    article: Literal["000", "002", "h200"] = Field(
        description="article 000 or 002, or h200: real vLLM measured by this project"
    )
    what: str
    published: float
    unit: str
    tolerance: float = Field(ge=0, description="relative to published, or absolute")
    absolute: bool = False
    profile: str = "qwen3-1.7b-8gb"
    known_off: str | None = Field(default=None, description="why it stays outside its band")

    @property
    def fitted(self) -> bool:
        return self.id in resolve_profile(self.profile).fitted_on

    @property
    def band(self) -> tuple[float, float]:
        half = self.tolerance if self.absolute else self.tolerance * abs(self.published)
        return self.published - half, self.published + half

    def error(self, simulated: float) -> float:
        """Signed error: relative for relative tolerances, in the unit for absolute ones."""
        if self.absolute or self.published == 0:
            return simulated - self.published
        return simulated / self.published - 1

    def passes(self, simulated: float) -> bool:
        low, high = self.band
        return low <= simulated <= high


@cache
def load_figures() -> tuple[Figure, ...]:
    """The table, validated; ids are unique."""
    figures = TypeAdapter(tuple[Figure, ...]).validate_python(
        yaml.safe_load(_TABLE.read_text(encoding="utf-8"))
    )
    ids = [f.id for f in figures]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate figure ids in {_TABLE.name}")
    return figures
