"""Typed failures of a run, raised by back ends and read by the runner and the operator.

Each carries a `reason` (a condition reason, CamelCase) and whether retrying can help: a
transient failure costs one attempt of the run's budget, a permanent one (a spec the back end
cannot run) ends the experiment at once.
"""

__all__ = [
    "ApiUnavailable",
    "Forbidden",
    "ImagePullFailed",
    "LoadFailed",
    "NoKvEvents",
    "NoResponses",
    "RunFailure",
    "RunTimeout",
    "SpecNotRunnable",
    "Unschedulable",
    "WorkersDisturbed",
    "WorkersNotReady",
]


class RunFailure(Exception):
    """A run attempt that produced no valid record. `partial`: it left a result document of
    part of its run (kept as evidence, never aggregated)."""

    reason = "RunFailed"
    permanent = False
    partial = False


class NoCapacity(Exception):
    """Not a failure: the workers' GPUs are taken now. The runner waits, with this reason in
    the status, and asks again; nothing was started."""


class SpecNotRunnable(RunFailure):
    """The back end cannot run this spec at all; each problem names the field."""

    reason = "SpecNotRunnable"
    permanent = True

    def __init__(self, problems: list[str]) -> None:
        super().__init__("this back end cannot run the experiment:\n  " + "\n  ".join(problems))
        self.problems = problems


class WorkersNotReady(RunFailure):
    """Workers did not become ready in time, or exited; the reason of every such pod."""

    reason = "WorkersNotReady"

    def __init__(self, pods: dict[str, str], message: str | None = None) -> None:
        detail = "; ".join(f"{pod}: {why}" for pod, why in pods.items())
        super().__init__(message or f"workers not ready: {detail}")
        self.pods = pods


class Unschedulable(WorkersNotReady):
    """No node can take the pods (GPUs, selectors, taints)."""

    reason = "Unschedulable"


class ImagePullFailed(WorkersNotReady):
    """A pod's image cannot be pulled."""

    reason = "ImagePullFailed"


class WorkersDisturbed(RunFailure):
    """A worker restarted, was replaced or vanished during the run: its figures are invalid."""

    reason = "WorkersDisturbed"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("workers changed during the run: " + "; ".join(problems))
        self.problems = problems


class NoKvEvents(RunFailure):
    """A kv_aware router received no KV events from a worker that served requests: it routed
    on load alone, so the window measured no KV-aware routing."""

    reason = "NoKvEvents"

    def __init__(self, silent: list[str], received: dict[str, int]) -> None:
        counts = ", ".join(f"{name}: {n}" for name, n in received.items())
        super().__init__(
            f"the kv_aware router received no KV events from {', '.join(silent)}, which "
            f"served requests (batches received per worker: {counts})"
        )
        self.silent = silent
        self.received = received


class LoadFailed(RunFailure):
    """The load generator ended without a result document."""

    reason = "LoadFailed"


class LoadStopped(RunFailure):
    """The load generator was stopped (SIGTERM: its pod deleted or evicted) before its run
    ended; the part it measured is kept, marked partial."""

    reason = "LoadStopped"
    partial = True


class NoResponses(RunFailure):
    """Every measured request failed: the window measured no server (a Service with no
    route to its pods, a name the cluster DNS does not answer), only the failures, which are
    kept as evidence."""

    reason = "NoResponses"


class RunTimeout(RunFailure):
    """The load generator outlived `timeouts.run` and was stopped."""

    reason = "RunTimeout"


class ApiUnavailable(RunFailure):
    """The cluster's API could not be reached or refused the call."""

    reason = "ApiUnavailable"


class Forbidden(RunFailure):
    """The API server refused the back end a call (its RBAC lacks it): no retry helps."""

    reason = "Forbidden"
    permanent = True
