"""The persisted state of one planned run: which step it is at, on which attempt, with what.

The runner writes a run's state to the store *before* each side effect, so a runner that
stops at any point (cancelled, crashed, killed) leaves enough for the next one to continue:

    pending -> workers-starting -> workers-ready -> arm-open -> load-running -> collecting
            -> recorded | failed

`load_started_at` is set once the load generator has been started, which tells "never
started" (start it now) from "started and gone" (the attempt is lost) when resuming at
load-running, and what is left of `timeouts.run` for an adopted one.
"""

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from kvbench.api import AttemptFailure, RunPlacement
from kvbench.runner.cluster.base import ArmEndpoint, ChildNames, WorkerInfo

__all__ = ["RunStage", "RunState"]


class RunStage(StrEnum):
    PENDING = "pending"
    WORKERS_STARTING = "workers-starting"
    WORKERS_READY = "workers-ready"
    ARM_OPEN = "arm-open"
    LOAD_RUNNING = "load-running"
    COLLECTING = "collecting"
    RECORDED = "recorded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (RunStage.RECORDED, RunStage.FAILED)


class RunState(BaseModel):
    """One run's step, attempt and children, as last written to the store."""

    index: int = Field(..., ge=0)
    id: str
    stage: RunStage = RunStage.PENDING
    attempt: int = Field(1, ge=1)
    names: ChildNames
    workers: list[WorkerInfo] = Field(default_factory=list)
    endpoint: ArmEndpoint | None = None
    load_started_at: datetime | None = None
    raw: str | None = Field(None, description="Where the collected result document is stored")
    kv_events: dict[str, int] | None = Field(
        None, description="KV event batches a kv_aware router received, per worker"
    )
    placement: RunPlacement | None = Field(
        None, description="Where the load generator and the router ran (nodes)"
    )
    failures: list[AttemptFailure] = Field(default_factory=list)

    def next_attempt(self, failure: AttemptFailure | None) -> "RunState":
        """A fresh attempt after this one, recording why this one is void."""
        failures = [*self.failures, failure] if failure else self.failures
        attempt = self.attempt + 1
        return RunState(
            index=self.index,
            id=self.id,
            attempt=attempt,
            names=self.names.model_copy(update={"attempt": attempt}),
            failures=failures,
        )
