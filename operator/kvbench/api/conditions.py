"""The one place that sets conditions, so `lastTransitionTime` follows the Kubernetes
convention everywhere: it moves only when a condition's `status` changes, never when only its
reason or message does, and parsing a stored condition never invents a time."""

from datetime import UTC, datetime

from kvbench.api.status import Condition, ConditionType

__all__ = ["condition", "set_condition"]


def set_condition(
    conditions: list[Condition],
    type_: ConditionType | str,
    status: bool | None,
    reason: str,
    message: str = "",
    generation: int | None = None,
    now: datetime | None = None,
) -> list[Condition]:
    """`conditions` with `type_` set (True/False; None means Unknown), in their order.

    An empty message becomes the reason: Kubernetes 1.20 stores an empty string in a list-map
    item as null and then refuses it as not a string."""
    text = "Unknown" if status is None else str(bool(status))
    now = now or datetime.now(UTC)
    previous = condition(conditions, type_)
    changed = previous is None or previous.status != text or previous.last_transition_time is None
    updated = Condition(
        type=str(type_),
        status=text,
        reason=reason,
        message=message or reason,
        last_transition_time=now if changed else previous.last_transition_time,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, updated]
    return [updated if c.type == str(type_) else c for c in conditions]


def condition(conditions: list[Condition], type_: ConditionType | str) -> Condition | None:
    """The condition of that type, if set."""
    return next((c for c in conditions if c.type == str(type_)), None)
