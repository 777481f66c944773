"""Mooncake traces: one JSON object per line, `{"timestamp": ms, "input_length": tokens,
"output_length": tokens, "hash_ids": [ints]}`, read and checked row by row.

The conventions are Mooncake's own (its FAST'25 traces) as aiperf's `mooncake_trace` loader
and guidellm's `mooncake` deserializer read them:

- `timestamp`: milliseconds since the trace's start; rows must be in time order;
- `hash_ids`: one id per block of `blockTokens` prompt tokens (512 in Mooncake's traces), the
  last block partial, so `len(hash_ids) == ceil(input_length / blockTokens)` (guidellm checks
  exactly this; aiperf cuts the last block to `input_length - (len - 1) x blockTokens`). The
  ids are chain hashes: an id stands for the whole prompt up to the end of its block, so two
  rows that share an id at position i share everything before it too.

A row that breaks any of this is refused with its line number and what is wrong: a trace
that is replayed as something other than it says would measure another workload.
"""

import hashlib
import math
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbench.api.load import MAX_REQUESTS
from kvbench.api.workload import TraceInfo, TraceWorkload

__all__ = ["FIELDS", "Trace", "TraceError", "TraceRow", "parse_trace"]

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace that cannot be replayed: the message names the source and the line."""


class TraceRow(BaseModel):
    """One request of the trace, as the file has it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    timestamp: float = Field(..., ge=0, description="Milliseconds since the trace's start")
    input_length: int = Field(..., ge=1, description="Prompt tokens")
    output_length: int = Field(..., ge=1, description="Tokens to generate")
    hash_ids: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        ..., description="One id per block of prompt tokens"
    )

    def block_lengths(self, block_tokens: int) -> list[int]:
        """Tokens of each block: `block_tokens`, the last cut to make `input_length`."""
        last = self.input_length - (len(self.hash_ids) - 1) * block_tokens
        return [block_tokens] * (len(self.hash_ids) - 1) + [last]


@dataclass(frozen=True)
class Trace:
    """A trace's rows (the first `maxRows`), the line of each, and the sha256 of its whole
    file."""

    rows: tuple[TraceRow, ...]
    lines: tuple[int, ...]
    sha256: str
    source: str

    @property
    def info(self) -> TraceInfo:
        rows = self.rows
        return TraceInfo(
            source=self.source,
            sha256=self.sha256,
            rows=len(rows),
            input_tokens=round(sum(r.input_length for r in rows) / len(rows)),
            output_tokens=round(sum(r.output_length for r in rows) / len(rows)),
            seconds=(rows[-1].timestamp - rows[0].timestamp) / 1000,
        )


def _problem(err: ValidationError) -> str:
    """The row's first problem, with the field it is in."""
    first = err.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])[1:]
    if first["type"] == "extra_forbidden":
        return f"{where}: unknown field (a Mooncake row has {', '.join(FIELDS)})"
    if first["type"] == "model_type":
        return "not a JSON object"
    return f"{where}: {first['msg']}" if where else first["msg"]


def _row(line: bytes, block_tokens: int) -> TraceRow:
    try:
        row = TraceRow.model_validate_json(line)
    except ValidationError as err:
        raise ValueError(_problem(err)) from None
    blocks = math.ceil(row.input_length / block_tokens)
    if len(row.hash_ids) != blocks:
        raise ValueError(
            f"hash_ids has {len(row.hash_ids)} ids; input_length {row.input_length} in blocks "
            f"of {block_tokens} tokens needs ceil({row.input_length} / {block_tokens}) = {blocks}"
        )
    return row


def parse_trace(data: bytes, spec: TraceWorkload, source: str) -> Trace:
    """The rows of a Mooncake trace, up to `spec.maxRows` (blank lines skipped); a
    `TraceError` naming `source` and the line of the first bad row."""
    limit = spec.max_rows or MAX_REQUESTS
    rows: list[TraceRow] = []
    lines: list[int] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        if len(rows) == limit:
            if spec.max_rows is None:
                raise TraceError(
                    f"{source}: more than {MAX_REQUESTS:,} rows; replay a part (trace.maxRows)"
                )
            break
        try:
            row = _row(line, spec.block_tokens)
        except ValueError as err:
            raise TraceError(f"{source} line {number}: {err}") from None
        if rows and row.timestamp < rows[-1].timestamp:
            raise TraceError(
                f"{source} line {number}: timestamp {row.timestamp:g} is before the previous "
                f"row's {rows[-1].timestamp:g} (rows must be in time order)"
            )
        rows.append(row)
        lines.append(number)
    if not rows:
        raise TraceError(f"{source}: no rows")
    digest = hashlib.sha256(data).hexdigest()
    return Trace(rows=tuple(rows), lines=tuple(lines), sha256=digest, source=source)
