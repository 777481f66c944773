"""An experiment outside the operator's namespaces is told so: one condition (Ready=False,
NotWatched, saying where the operator runs, what it watches and how to change that) and one
Event, once; experiments it runs, another operator runs or already told are left alone. No
API server: the status writes are captured."""

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from kvbench.operator import handlers
from kvbench.operator.metrics import OperatorMetrics
from kvbench.operator.status import ResourceStatus
from kvbench.operator.unwatched import NotWatchedReporter, needs_notice

WATCHED = frozenset({"kvbench-system"})


def _body(namespace: str, status: dict | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kvbench.io/v1alpha1",
        "kind": "BenchmarkExperiment",
        "metadata": {"name": "exp", "namespace": namespace, "uid": f"uid-{namespace}",
                     "resourceVersion": "7", **meta},
        "spec": {},
        **({"status": status} if status is not None else {}),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (_body("bench"), True),
        (_body("bench", {}), True),
        (_body("bench", {"conditions": [{"type": "Other", "reason": "X"}]}), True),
        (_body("kvbench-system"), False),
        (_body("bench", {"phase": "Running"}), False),
        (_body("bench", {"conditions": [{"type": "Ready", "reason": "NotWatched"}]}), False),
        (_body("bench", deletionTimestamp="2026-01-01T00:00:00Z"), False),
    ],
    ids=["outside", "empty status", "other conditions", "watched", "another operator runs it",
         "already told", "being deleted"],
)  # fmt: skip
def test_which_experiments_are_told(body: dict, expected: bool) -> None:
    assert needs_notice(body, WATCHED) is expected


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    """(namespace/name, what, content) of every status patch and Event."""
    found: list[tuple[str, str, Any]] = []

    def patch(self: ResourceStatus, status: dict) -> None:
        found.append((f"{self.namespace}/{self.name}", "patch", status))

    def event(self: ResourceStatus, type_: str, reason: str, message: str) -> None:
        found.append((f"{self.namespace}/{self.name}", "event", (type_, reason, message)))

    monkeypatch.setattr(ResourceStatus, "patch", patch)
    monkeypatch.setattr(ResourceStatus, "event", event)
    return found


def _reporter(runs_in: str | None = "kvbench-system") -> NotWatchedReporter:
    return NotWatchedReporter(kubernetes.client.ApiClient(), WATCHED, runs_in)


def test_an_experiment_elsewhere_gets_one_condition_and_one_event_saying_why(written) -> None:
    """The bug: applied outside the watched namespaces, it had no phase, no condition, no
    event, nothing said why."""
    other = {"type": "Custom", "status": "True", "reason": "Mine", "message": "kept"}
    _reporter().consider(_body("bench", {"conditions": [other]}))
    [(where, _, status), (_, _, (type_, reason, message))] = written
    assert where == "bench/exp"
    assert set(status) == {"conditions"}, "nothing but the condition: no phase"
    custom, ready = status["conditions"]
    assert custom == other
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "NotWatched")
    assert (type_, reason, message) == ("Warning", "NotWatched", ready["message"])
    for words in ("in namespace kvbench-system", "watches only namespace(s) kvbench-system",
                  "not bench", "watch.namespaces", "watch.allNamespaces=true"):  # fmt: skip
        assert words in message, words


def test_outside_a_pod_the_message_names_no_namespace_of_its_own(written) -> None:
    _reporter(runs_in=None).consider(_body("bench"))
    message = written[-1][2][2]
    assert message.startswith("not run: the kvbench operator watches only")


def test_watched_ones_and_ones_already_told_get_nothing(written) -> None:
    reporter = _reporter()
    reporter.consider(_body("kvbench-system"))
    reporter.consider(_body("bench", {"conditions": [{"type": "Ready", "reason": "NotWatched"}]}))
    assert written == []


class Scripted(NotWatchedReporter):
    """A listing and one watch's events, then the reporter is stopped."""

    def __init__(self, listed: list[dict], events: list[dict]) -> None:
        super().__init__(kubernetes.client.ApiClient(), WATCHED, "kvbench-system")
        self.listed, self.script = listed, events

    def _list(self) -> tuple[list[dict], str]:
        return self.listed, "1"

    def _events(self, since: str) -> Iterator[dict]:
        yield from self.script
        self.stop()


def test_the_watch_tells_listed_and_new_experiments_elsewhere(written) -> None:
    listed = [_body("kvbench-system"), _body("bench")]
    told = {"conditions": [{"type": "Ready", "reason": "NotWatched"}]}
    events = [
        {"type": "ADDED", "object": _body("late")},
        {"type": "MODIFIED", "object": _body("bench", told)},
        {"type": "DELETED", "object": _body("gone")},
    ]
    Scripted(listed, events).run()
    assert [where for where, what, _ in written if what == "event"] == ["bench/exp", "late/exp"]


def test_only_an_operator_given_namespaces_tells_others() -> None:
    client = kubernetes.client.ApiClient()
    handlers.configure_operator(client, OperatorMetrics(), ["a", "b"])
    [reporter] = handlers._reporter
    assert reporter.watched == {"a", "b"}
    handlers.configure_operator(client, OperatorMetrics(), None)
    assert handlers._reporter == []
