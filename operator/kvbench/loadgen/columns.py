"""The per-request records as columns: one list per field, every number in microseconds.

A row per request repeats every key for every request; 1,200 rows of sim timings and token
gaps came to megabytes, more than a Kubernetes object holds. Columns name each field once and
keep similar values together, which also helps gzip. `records()` gives the rows back, so every
reader works on `RequestRecord`s as before.
"""

from collections.abc import Sequence
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from kvbench.api.base import ApiModel
from kvbench.loadgen.records import RequestRecord, SimTiming, e2e_field

__all__ = ["RequestColumns", "SimColumns", "microseconds"]

_OPTIONAL_FIELDS = ["conversation", "turn"]
"""Columns only conversation workloads fill: left out of documents where no request has one
(as documents written before they existed are)."""
_RECORD_FIELDS = [
    name for name in RequestRecord.model_fields if name != "sim" and name not in _OPTIONAL_FIELDS
]
_SIM_FIELDS = list(SimTiming.model_fields)


def microseconds(value: Any) -> Any:
    """A float (or a list of floats) rounded to the microsecond; anything else as it is."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [microseconds(v) for v in value]
    return value


def _columns(rows: Sequence[BaseModel], fields: list[str]) -> dict[str, list[Any]]:
    return {name: [microseconds(getattr(row, name)) for row in rows] for name in fields}


def _rows(columns: BaseModel, fields: list[str]) -> list[dict[str, Any]]:
    values = zip(*(getattr(columns, name) for name in fields), strict=True)
    return [dict(zip(fields, row, strict=True)) for row in values]


def _lengths(columns: BaseModel, fields: list[str]) -> set[int]:
    return {len(getattr(columns, name)) for name in fields}


class SimColumns(ApiModel):
    """The simulator's timings of the requests that have them (`rows` into the requests)."""

    rows: list[int] = Field(..., description="Positions in the request columns")
    worker: list[str | None]
    arrival: list[float | None]
    ttft: list[float | None]
    e2e: list[float | None] = e2e_field(...)
    queue: list[float | None]
    itl: list[list[float]]
    preemptions: list[int | None]
    cached_tokens: list[int | None]
    time_scale: list[float | None]

    @model_validator(mode="after")
    def _aligned(self) -> Self:
        if len(_lengths(self, _SIM_FIELDS) | {len(self.rows)}) > 1:
            raise ValueError("sim columns of different lengths")
        return self


class RequestColumns(ApiModel):
    """Every request, warm-up and measured, failed or not: row i is request i of every list."""

    phase: list[Literal["warmup", "measured"]]
    index: list[int]
    role: list[str]
    group: list[int | None]
    endpoint: list[str]
    due: list[float]
    start: list[float]
    end: list[float]
    ttft: list[float | None]
    e2e: list[float | None] = e2e_field(...)
    itl: list[list[float]]
    prompt_tokens: list[int | None]
    output_tokens: list[int | None]
    cached_tokens: list[int | None]
    worker_id: list[int | None]
    status: list[int | None]
    error_kind: list[str | None]
    error: list[str | None]
    conversation: list[int | None] | None = None
    turn: list[int | None] | None = None
    sim: SimColumns | None = Field(None, description="Absent when no server reported its clock")

    @model_validator(mode="after")
    def _aligned(self) -> Self:
        present = [name for name in _OPTIONAL_FIELDS if getattr(self, name) is not None]
        lengths = _lengths(self, _RECORD_FIELDS + present)
        if len(lengths) > 1:
            raise ValueError("request columns of different lengths")
        count = lengths.pop()
        if self.sim is not None and any(not 0 <= row < count for row in self.sim.rows):
            raise ValueError("sim rows outside the request columns")
        return self

    @classmethod
    def from_records(cls, records: list[RequestRecord]) -> "RequestColumns":
        timed = [(i, r.sim) for i, r in enumerate(records) if r.sim is not None]
        sim = None
        if timed:
            sim = SimColumns(
                rows=[i for i, _ in timed], **_columns([s for _, s in timed], _SIM_FIELDS)
            )
        optional = [n for n in _OPTIONAL_FIELDS if any(getattr(r, n) is not None for r in records)]
        return cls(**_columns(records, _RECORD_FIELDS + optional), sim=sim)

    def records(self) -> list[RequestRecord]:
        """The rows, in the order they were recorded."""
        present = [name for name in _OPTIONAL_FIELDS if getattr(self, name) is not None]
        rows = _rows(self, _RECORD_FIELDS + present)
        if self.sim is not None:
            for row, timing in zip(self.sim.rows, _rows(self.sim, _SIM_FIELDS), strict=True):
                rows[row]["sim"] = SimTiming(**timing)
        return [RequestRecord(**row) for row in rows]
