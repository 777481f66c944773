"""What Argo CD (the chart's Lua health check) and Flux (kstatus) make of the statuses the
operator's status writer patches onto an experiment, phase by phase. The end-to-end test
(tests/e2e/test_gitops.py) runs the same checks on statuses from real runs."""

from typing import Any

import kubernetes
import pytest

from kvbench.api import (
    CurrentRun,
    ExperimentPhase,
    ExperimentProgress,
    ExperimentStatus,
)
from kvbench.operator.status import ResourceStatus
from kvbench.testing.gitops import argocd_health, kstatus


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch, as the API server applies a status patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


class _Custom:
    """The custom-objects API, keeping the one resource the status writer patches."""

    def __init__(self, resource: dict[str, Any]) -> None:
        self.resource = resource

    def patch_namespaced_custom_object_status(self, *args: Any) -> None:
        _merge(self.resource, args[-1])


class _Events:
    def create_namespaced_event(self, namespace: str, body: Any) -> None:
        pass


def _writer(generation: int = 1) -> tuple[ResourceStatus, dict[str, Any]]:
    resource: dict[str, Any] = {"metadata": {"name": "e", "generation": generation}}
    writer = ResourceStatus(kubernetes.client.ApiClient(), "ns", "e", "uid")
    writer.custom, writer.events = _Custom(resource), _Events()  # type: ignore[assignment]
    writer.generation = generation
    return writer, resource


def _status(phase: ExperimentPhase, done: int, failed: int = 0, **extra: Any) -> ExperimentStatus:
    progress = ExperimentProgress(done=done, failed=failed, total=4, display=f"{done}/4")
    return ExperimentStatus(phase=phase, progress=progress, **extra)


RUNNING = _status(
    ExperimentPhase.RUNNING,
    1,
    current=CurrentRun(index=1, id="r1", stage="load-running", attempt=1),
)


def test_no_status_yet_is_progressing_for_argo_and_current_for_kstatus() -> None:
    resource = {"metadata": {"name": "e", "generation": 1}}
    assert argocd_health(resource).status == "Progressing"
    assert kstatus(resource).status == "Current", "kstatus cannot tell before a status exists"


@pytest.mark.parametrize(
    ("statuses", "argo", "flux"),
    [
        ([_status(ExperimentPhase.PENDING, 0)], "Progressing", "InProgress"),
        ([_status(ExperimentPhase.PENDING, 0), RUNNING], "Progressing", "InProgress"),
        ([RUNNING, _status(ExperimentPhase.SUCCEEDED, 4)], "Healthy", "Current"),
        (
            [RUNNING, _status(ExperimentPhase.FAILED, 3, failed=1, message="run r2 failed")],
            "Degraded",
            "Failed",
        ),
    ],
    ids=["pending", "running", "succeeded", "failed"],
)
def test_each_phase_reads_as_gitops_tools_expect(
    statuses: list[ExperimentStatus], argo: str, flux: str
) -> None:
    writer, resource = _writer()
    for status in statuses:
        writer.status(status)
    assert resource["status"]["observedGeneration"] == 1
    assert argocd_health(resource).status == argo
    assert kstatus(resource).status == flux


def test_running_message_names_the_progress_and_the_stage() -> None:
    writer, resource = _writer()
    writer.status(RUNNING)
    assert argocd_health(resource).message == "Running: 1/4 runs, run r1 load-running"


def test_a_failure_before_the_runner_is_degraded_with_its_message() -> None:
    writer, resource = _writer()
    writer.fail("InvalidSpec", "spec.workload.sharedPrefix.prefixes: too short")
    health = argocd_health(resource)
    assert health.status == "Degraded" and "prefixes" in health.message
    assert kstatus(resource).status == "Failed"


def test_a_generation_the_operator_has_not_seen_is_progressing() -> None:
    writer, resource = _writer()
    writer.status(_status(ExperimentPhase.SUCCEEDED, 4))
    resource["metadata"]["generation"] = 2
    assert argocd_health(resource).status == "Progressing"
    assert kstatus(resource).status == "InProgress"


def test_a_refused_spec_change_is_seen_and_stays_degraded_when_the_runs_finish() -> None:
    writer, resource = _writer()
    writer.status(RUNNING)
    resource["metadata"]["generation"] = 2
    writer.refuse_spec_change(2, "the spec changed after the experiment started")
    assert resource["status"]["observedGeneration"] == 2
    writer.status(_status(ExperimentPhase.SUCCEEDED, 4))
    health = argocd_health(resource)
    assert health.status == "Degraded" and "changed" in health.message
    assert kstatus(resource).status == "Failed", "Stalled: the new spec will not be run"
