"""The result document of one run: versioned JSON with the conditions it was measured under,
every request, per-pod counter deltas, the client's health and the summary.
"""

import platform
import sys
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

from pydantic import Field

from kvbench import __version__
from kvbench.api.base import ApiModel
from kvbench.api.status import PodResult, Point, RunSummary
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.summary import Summary

__all__ = [
    "RESULT_KIND",
    "Conditions",
    "CounterReport",
    "LoadgenResult",
    "Versions",
    "Window",
    "versions",
]

RESULT_KIND = "LoadgenResult"


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
    workload: str = Field(..., description="shared_prefix, random or interference")
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
    pods: list[PodResult] | None = None
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


class LoadgenResult(ApiModel):
    """One run's result document (`kvbench loadgen --out`)."""

    schema_version: Literal[1] = 1
    kind: Literal["LoadgenResult"] = RESULT_KIND
    conditions: Conditions
    window: Window
    summary: Summary
    run_summary: RunSummary = Field(..., description="The figures the experiment status keeps")
    client: ClientHealth
    counters: CounterReport
    warnings: list[str] = Field(default_factory=list)
    requests: list[RequestRecord]
    config: RunConfig

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(by_alias=True, exclude_none=True, indent=1))

    @classmethod
    def load(cls, path: Path) -> "LoadgenResult":
        return cls.model_validate_json(path.read_text())


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
