"""The experiment's status, built from the plan and the store.

Small by design: counts, the run under way, the last recorded run's figures, the aggregate
and where the full records are. Conditions are the operator's (it alone knows generations
and the API server); the runner reports what the runs say.
"""

from datetime import UTC, datetime

from kvbench.api import (
    CurrentRun,
    ExperimentPhase,
    ExperimentProgress,
    ExperimentStatus,
    LastRun,
    PodFigures,
    RunRecord,
)
from kvbench.plan import Plan
from kvbench.runner.states import RunState
from kvbench.runner.stores.base import RunStore

__all__ = ["experiment_status", "last_run"]


def last_run(record: RunRecord) -> LastRun:
    """A recorded run in the few figures the status shows."""
    s = record.summary
    return LastRun(
        id=record.id,
        index=record.index,
        attempt=record.attempt,
        digest=record.digest,
        request_hit_rate=s.request_hit_rate,
        token_hit_rate=s.token_hit_rate,
        ttft_p50=s.ttft_p50,
        ttft_p99=s.ttft_p99,
        errors=s.errors,
        pods=[
            PodFigures(
                pod=p.pod,
                kv_cache_tokens=p.kv_cache_tokens or p.configured_kv_cache_tokens,
                hits=p.prefix_cache_hits,
                queries=p.prefix_cache_queries,
                requests=p.requests,
                preemptions=p.preemptions,
            )
            for p in record.pods
        ],
    )


def _finished(record: RunRecord) -> datetime:
    return record.finished_at or datetime.min.replace(tzinfo=UTC)


def experiment_status(
    plan: Plan,
    store: RunStore,
    current: RunState | None,
    started_at: datetime | None,
    finished_at: datetime | None,
    generation: int | None,
    waiting: str | None = None,
) -> ExperimentStatus:
    """The status of the experiment as the store has it now; `waiting`: why its next workers
    cannot start yet (Pending, with that message)."""
    records = store.records()
    failed = [r for r in records if r.error is not None]
    good = [r for r in records if r.error is None]
    total = len(plan.runs)
    if finished_at is None:
        phase = ExperimentPhase.PENDING if waiting else ExperimentPhase.RUNNING
    else:
        phase = ExperimentPhase.FAILED if failed else ExperimentPhase.SUCCEEDED
    running = current if current is not None and not current.stage.finished else None
    notes = []
    if failed:
        notes.append(f"{len(failed)} run(s) failed: " + ", ".join(r.id for r in failed[:5]))
    if waiting:
        notes.append(f"waiting: {waiting}")
    message = "; ".join(notes) or None
    return ExperimentStatus(
        phase=phase,
        observed_generation=generation,
        progress=ExperimentProgress(
            done=len(records),
            failed=len(failed),
            total=total,
            current_run=running.id if running else None,
            display=f"{len(records)}/{total}",
        ),
        current=CurrentRun(
            index=running.index, id=running.id, stage=running.stage.value, attempt=running.attempt
        )
        if running
        else None,
        started_at=started_at,
        finished_at=finished_at,
        last_run=last_run(max(good, key=_finished)) if good else None,
        aggregate=store.aggregate(),
        results=store.location(),
        message=message,
    )
