"""What a user reads on the resource: its status (with conditions) and its Events.

The runner's observer for the operator: every status the runner publishes is patched onto
the resource's status subresource with the conditions the operator keeps, and every step
becomes an Event. Writes that fail are logged, never raised: the store, not the status, is
the source of truth, and the next status patch carries everything again.
"""

import logging
from datetime import UTC, datetime
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from kvbench.api import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    AttemptFailure,
    Condition,
    ConditionType,
    ExperimentPhase,
    ExperimentStatus,
    RunRecord,
)
from kvbench.api.conditions import condition, set_condition
from kvbench.plan import Plan, PlannedRun
from kvbench.runner.states import RunStage, RunState

__all__ = ["ResourceStatus", "conditions_for"]

log = logging.getLogger(__name__)


def conditions_for(
    status: ExperimentStatus, previous: list[Condition], generation: int | None
) -> list[Condition]:
    """Ready / Progressing / Reconciling / Stalled / Succeeded / Failed from the phase,
    keeping the others."""
    conditions = previous
    phase = status.phase
    done = phase in (ExperimentPhase.SUCCEEDED, ExperimentPhase.FAILED)
    running_reason = (
        f"Run{status.current.stage.title().replace('-', '')}" if status.current else "Running"
    )
    conditions = set_condition(
        conditions,
        ConditionType.PROGRESSING,
        not done,
        "Finished" if done else running_reason,
        status.progress.display + (f", run {status.current.id}" if status.current else ""),
        generation,
    )
    conditions = set_condition(
        conditions,
        ConditionType.READY,
        phase == ExperimentPhase.SUCCEEDED,
        {"Succeeded": "Succeeded", "Failed": "Failed"}.get(phase, "Running"),
        status.message or "",
        generation,
    )
    conditions = set_condition(
        conditions, ConditionType.RECONCILING, not done,
        "Finished" if done else running_reason, status.progress.display, generation,
    )  # fmt: skip
    refused = condition(previous, ConditionType.SPEC_CHANGED)
    if refused is not None and refused.status == "True":
        conditions = set_condition(
            conditions, ConditionType.STALLED, True, refused.reason, refused.message, generation
        )
    else:
        conditions = set_condition(
            conditions, ConditionType.STALLED, phase == ExperimentPhase.FAILED,
            {"Succeeded": "Succeeded", "Failed": "RunsFailed"}.get(phase, "Running"),
            status.message or "", generation,
        )  # fmt: skip
    if done:
        conditions = set_condition(
            conditions, ConditionType.SUCCEEDED, phase == ExperimentPhase.SUCCEEDED,
            "AllRunsRecorded" if phase == ExperimentPhase.SUCCEEDED else "RunsFailed",
            status.message or f"{status.progress.done} runs recorded", generation,
        )  # fmt: skip
        conditions = set_condition(
            conditions, ConditionType.FAILED, phase == ExperimentPhase.FAILED,
            "RunsFailed" if phase == ExperimentPhase.FAILED else "AllRunsRecorded",
            status.message or "", generation,
        )  # fmt: skip
    return conditions


class ResourceStatus:
    """Patches one experiment's status and posts its Events."""

    def __init__(
        self, client: kubernetes.client.ApiClient, namespace: str, name: str, uid: str
    ) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.events = kubernetes.client.CoreV1Api(client)
        self.namespace, self.name, self.uid = namespace, name, uid
        self.conditions: list[Condition] = []
        self.generation: int | None = None

    def patch(self, status: dict[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.name, {"status": status}
            )
        except ApiException as err:
            log.warning(
                "status of %s/%s not written: %s %s",
                self.namespace, self.name, err.reason, (err.body or "")[:600],
            )  # fmt: skip

    def refuse_spec_change(self, generation: int | None, message: str) -> None:
        """The spec changed after the start: the operator has seen that generation (and
        refused it), so tools that compare generations stop waiting; Stalled tells them the
        spec will not be carried out."""
        self.generation = generation
        for type_ in (ConditionType.SPEC_CHANGED, ConditionType.STALLED):
            self.conditions = set_condition(
                self.conditions, type_, True, "SpecImmutable", message, generation
            )
        self.patch(
            {
                "observedGeneration": generation,
                "conditions": [c.to_k8s() for c in self.conditions],
            }
        )

    def not_watched(self, reason: str, message: str) -> None:
        """An experiment the operator does not run (outside its namespaces): that one
        condition and an Event, nothing else (no phase: the operator does not own it)."""
        self.conditions = set_condition(
            self.conditions, ConditionType.READY, False, reason, message
        )
        self.patch({"conditions": [c.to_k8s() for c in self.conditions]})
        self.event("Warning", reason, message)

    def fail(self, reason: str, message: str) -> None:
        """The experiment failed before or outside the runner (an invalid spec, a spec the
        cluster cannot run)."""
        now = datetime.now(UTC)
        for type_, value, why in (
            (ConditionType.FAILED, True, reason),
            (ConditionType.SUCCEEDED, False, reason),
            (ConditionType.READY, False, reason),
            (ConditionType.PROGRESSING, False, reason),
            (ConditionType.RECONCILING, False, reason),
            (ConditionType.STALLED, True, reason),
        ):
            self.conditions = set_condition(
                self.conditions, type_, value, why, message, self.generation, now
            )
        self.patch(
            {
                "phase": ExperimentPhase.FAILED.value,
                "observedGeneration": self.generation,
                "message": message,
                "finishedAt": now.isoformat(),
                "conditions": [c.to_k8s() for c in self.conditions],
            }
        )
        self.event("Warning", reason, message)

    def event(self, type_: str, reason: str, message: str) -> None:
        now = datetime.now(UTC)
        body = kubernetes.client.CoreV1Event(
            metadata=kubernetes.client.V1ObjectMeta(
                generate_name=f"{self.name}.", namespace=self.namespace
            ),
            involved_object=kubernetes.client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind=KIND,
                name=self.name,
                namespace=self.namespace,
                uid=self.uid,
            ),
            reason=reason,
            message=message[:1024],
            type=type_,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=kubernetes.client.V1EventSource(component="kvbench-operator"),
        )
        try:
            self.events.create_namespaced_event(self.namespace, body)
        except ApiException as err:
            log.warning("event %s of %s not posted: %s", reason, self.name, err.reason)

    # the runner's observer

    def started(self, plan: Plan, done: int) -> None:
        self.event("Normal", "Started", f"{len(plan.runs)} runs planned, {done} already done")

    def stage(self, run: PlannedRun, state: RunState) -> None:
        if state.stage == RunStage.WORKERS_STARTING:
            self.conditions = set_condition(
                self.conditions, ConditionType.WORKERS_READY, False, "Starting",
                f"fresh workers for run {run.id} (attempt {state.attempt})", self.generation,
            )  # fmt: skip
        elif state.stage == RunStage.WORKERS_READY:
            sizes = ", ".join(
                f"{w.name}={w.kv_cache_tokens or w.configured_kv_cache_tokens}"
                for w in state.workers
            )
            message = f"run {run.id}: KV cache tokens {sizes}"
            self.conditions = set_condition(
                self.conditions, ConditionType.WORKERS_READY, True, "Ready", message,
                self.generation,
            )  # fmt: skip
            self.event("Normal", "WorkersReady", message)
        elif state.stage == RunStage.LOAD_RUNNING and state.load_started_at is not None:
            self.event("Normal", "LoadStarted", f"run {run.id}: Job {state.names.load}")

    def recorded(self, run: PlannedRun, record: RunRecord) -> None:
        s = record.summary
        rate = "-" if s.request_hit_rate is None else f"{100 * s.request_hit_rate:.1f} %"
        self.event(
            "Normal", "RunRecorded",
            f"run {run.id}: {s.requests} requests, {s.errors} errors, hit rate {rate}",
        )  # fmt: skip

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None:
        then = "retrying on fresh workers" if retrying else "run failed"
        first = failure.message.splitlines()[0] if failure.message else ""
        self.event(
            "Warning", failure.reason, f"run {run.id} attempt {failure.attempt}: {first}; {then}"
        )

    def status(self, status: ExperimentStatus) -> None:
        self.conditions = conditions_for(status, self.conditions, self.generation)
        document = status.to_k8s()
        for cleared in ("current", "lastRun", "message", "finishedAt"):
            document.setdefault(cleared, None)  # null removes it in a merge patch
        document["progress"].setdefault("currentRun", None)
        document["conditions"] = [c.to_k8s() for c in self.conditions]
        document["observedGeneration"] = self.generation
        self.patch(document)
