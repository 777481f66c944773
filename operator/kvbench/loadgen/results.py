"""The result document of one run: versioned JSON with the conditions it was measured under,
every request (as columns), per-pod counter deltas, the client's health and the summary.

It is the load generator's own model: nothing in it is a type of the experiment's status, so
a change there does not change what a Job writes. On disk and on the wire it is gzip of
compact JSON (`encode`); `read_result` also takes the plain JSON `--out x.json` writes.
"""

import gzip
import json
import platform
import sys
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from kvbench import __version__
from kvbench.api import Point
from kvbench.api.base import ApiModel
from kvbench.api.workload import TraceInfo
from kvbench.loadgen.columns import RequestColumns
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.summary import Summary

__all__ = [
    "RESULT_KIND",
    "SCHEMA_VERSION",
    "Conditions",
    "CounterReport",
    "LoadgenResult",
    "ResultError",
    "Versions",
    "Window",
    "read_result",
    "versions",
]

RESULT_KIND = "LoadgenResult"
SCHEMA_VERSION = 2
_GZIP_MAGIC = b"\x1f\x8b"


class ResultError(ValueError):
    """Bytes that are not a result document this version of kvbench reads."""


class Versions(ApiModel):
    """Software that produced the figures."""

    kvbench: str
    python: str
    aiohttp: str | None = None
    event_loop: str = Field(..., description="uvloop <version>, or asyncio")
    platform: str


class Conditions(ApiModel):
    """What was sent, how and where: enough to tell whether two results are comparable."""

    run_id: str
    model: str
    api: str
    workload: str = Field(..., description="shared_prefix, random, interference or trace")
    prompt_format: str
    point: Point
    concurrency: int
    request_rate: float | None = None
    seed: int
    digest: str = Field(..., description="sha256 of the request sequence (warm-up + measured)")
    warmup_requests: int
    measured_requests: int
    schedule: str = Field(..., description="closed, poisson or scheduled")
    target: str = Field(..., description="The target URL, or prefix-affinity")
    endpoints: list[str] = Field(default_factory=list, description="Pods, under prefix-affinity")
    groups_by_pod: dict[str, list[int]] = Field(
        default_factory=dict, description="Prefix-affinity: the prefix groups each pod serves"
    )
    connection: Literal["new", "keep-alive"]
    metrics_source: str | None = None
    time_scale: float | None = Field(
        None, description="Wall s per server s: reported by the simulator, else configured"
    )
    clock: Literal["wall", "virtual"] = Field(
        "wall",
        description="virtual: a discrete-event simulation (`kvbench run --virtual`) ran the "
        "workers and the client on one simulated clock; every time is simulated, none measured",
    )
    client_send_seconds: float | None = Field(
        None, description="virtual: the modelled client's seconds per request sent, one at a time"
    )
    trace: TraceInfo | None = Field(
        None, description="A trace replay: the trace read (its sha256 checked against the plan)"
    )
    versions: Versions


class Window(ApiModel):
    """The measured window: from the first measured request sent to the last one finished."""

    started_at: datetime
    finished_at: datetime
    wall_seconds: float
    start: float = Field(..., description="Seconds from the run's start, as in the records")
    end: float


class CounterReport(ApiModel):
    """Per-pod counter deltas over the window, or why there are none."""

    source: str | None = None
    pods: list[PodDelta] | None = None
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


class LoadgenResult(ApiModel):
    """One run's result document (`kvbench loadgen --out`)."""

    schema_version: Literal[2] = SCHEMA_VERSION
    kind: Literal["LoadgenResult"] = RESULT_KIND
    conditions: Conditions
    window: Window
    summary: Summary
    client: ClientHealth
    counters: CounterReport
    warnings: list[str] = Field(default_factory=list)
    partial: str | None = Field(
        None,
        description="Set when the load generator was stopped before its run ended: why, and "
        "how far it got. The requests sent so far are all in the document; requests in flight "
        "are errors of kind `cancelled`, requests never sent are absent.",
    )
    requests: RequestColumns
    config: RunConfig

    def records(self) -> list[RequestRecord]:
        """Every request as a row, warm-up and measured, in the order they were recorded."""
        return self.requests.records()

    def to_json(self) -> str:
        """Compact JSON: the columns on one line each would be one number per line."""
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def encode(self) -> bytes:
        """gzip of the compact JSON, byte-identical for identical documents (no mtime)."""
        return gzip.compress(self.to_json().encode(), mtime=0)

    def save(self, path: Path) -> None:
        """gzip when the name ends in `.gz`, plain JSON otherwise."""
        path.write_bytes(self.encode() if path.suffix == ".gz" else self.to_json().encode())

    @classmethod
    def load(cls, path: Path) -> "LoadgenResult":
        return read_result(path.read_bytes())


def read_result(data: bytes) -> LoadgenResult:
    """The document in `data`, gzip or plain JSON; a ResultError for anything else, and for
    documents of another schema version (say which, rather than list every changed field)."""
    try:
        raw: Any = json.loads(gzip.decompress(data) if data[:2] == _GZIP_MAGIC else data)
    except (OSError, EOFError, ValueError) as err:
        raise ResultError(f"not a result document (gzip or JSON): {err}") from None
    if not isinstance(raw, dict) or raw.get("kind") != RESULT_KIND:
        raise ResultError(f"not a {RESULT_KIND} document")
    found = raw.get("schemaVersion")
    if found != SCHEMA_VERSION:
        raise ResultError(
            f"{RESULT_KIND} schema version {found}: this kvbench ({__version__}) reads version "
            f"{SCHEMA_VERSION} only (version 2 keeps requests as columns, counters as its own "
            "per-pod deltas, and no runSummary); re-run the load or read it with the kvbench "
            "that wrote it"
        )
    try:
        return LoadgenResult.model_validate(raw)
    except ValidationError as err:
        raise ResultError(f"invalid {RESULT_KIND} document: {err}") from None


def versions(event_loop: str) -> Versions:
    """The versions of everything in the measured path."""
    try:
        aiohttp_version: str | None = version("aiohttp")
    except PackageNotFoundError:
        aiohttp_version = None
    return Versions(
        kvbench=__version__,
        python=sys.version.split()[0],
        aiohttp=aiohttp_version,
        event_loop=event_loop,
        platform=platform.platform(),
    )
