"""The condition convention: `lastTransitionTime` moves only when `status` changes."""

from datetime import UTC, datetime, timedelta

from kvbench.api import Condition, ConditionType, ExperimentStatus
from kvbench.api.conditions import condition, set_condition

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_a_new_condition_gets_the_time_it_was_set() -> None:
    conditions = set_condition([], ConditionType.PROGRESSING, True, "RunStarted", now=T0)
    assert conditions[0].last_transition_time == T0
    assert conditions[0].status == "True"


def test_reason_or_message_changes_keep_the_transition_time() -> None:
    first = set_condition([], ConditionType.PROGRESSING, True, "RunStarted", "run 1", now=T0)
    later = set_condition(
        first, ConditionType.PROGRESSING, True, "RunRecorded", "run 2", now=T0 + timedelta(1)
    )
    assert condition(later, ConditionType.PROGRESSING).last_transition_time == T0
    assert condition(later, ConditionType.PROGRESSING).reason == "RunRecorded"


def test_a_status_change_moves_the_transition_time_and_keeps_the_others() -> None:
    t1 = T0 + timedelta(minutes=5)
    conditions = set_condition([], ConditionType.READY, False, "Running", now=T0)
    conditions = set_condition(conditions, ConditionType.PROGRESSING, True, "Running", now=T0)
    conditions = set_condition(conditions, ConditionType.READY, True, "Succeeded", now=t1)
    assert [c.type for c in conditions] == ["Ready", "Progressing"], "order is kept"
    assert condition(conditions, "Ready").last_transition_time == t1
    assert condition(conditions, "Progressing").last_transition_time == T0


def test_parsing_a_stored_condition_keeps_its_time() -> None:
    stored = {"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime":
              "2026-12-01T10:00:00Z"}  # fmt: skip
    assert Condition.model_validate(stored).last_transition_time == T0
    without = Condition.model_validate({"type": "Ready", "status": "True", "reason": "X"})
    assert without.last_transition_time is None, "parsing never invents a time"
    status = ExperimentStatus.model_validate({"conditions": [stored]})
    assert status.to_k8s()["conditions"][0]["lastTransitionTime"] == "2026-12-01T10:00:00Z"


def test_an_empty_message_is_never_written() -> None:
    conditions = set_condition([], ConditionType.READY, False, "Running", "", now=T0)
    assert conditions[0].message == "Running"
