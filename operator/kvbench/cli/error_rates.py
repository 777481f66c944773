"""Runs that failed too many of their requests: `kvbench run` names each with its commonest
error and exits non-zero, since figures measured over refusals are not figures."""

from kvbench.api import RunRecord
from kvbench.loadgen.errors import commonest_error
from kvbench.loadgen.results import ResultError, read_result
from kvbench.runner import RunStore

__all__ = ["DEFAULT_MAX_ERROR_RATE", "too_many_errors"]

DEFAULT_MAX_ERROR_RATE = 0.05


def _rate(record: RunRecord) -> float:
    summary = record.summary
    return summary.errors / summary.requests if summary.requests else 0.0


def _commonest(store: RunStore, record: RunRecord) -> str:
    """The commonest error from the run's result document (its records carry the messages)."""
    if record.raw_results is None:
        return "no result document kept"
    try:
        result = read_result(store.read_raw(record.raw_results))
    except (OSError, ResultError) as err:
        return f"its result document cannot be read: {err}"
    common = commonest_error(result.records())
    if common is None:
        return "no failed request in its result document"
    return f"commonest error ({common.count} of {common.failed}): {common.message}"


def too_many_errors(store: RunStore, records: list[RunRecord], max_rate: float) -> list[str]:
    """A line for every recorded run whose share of failed measured requests is above
    `max_rate`; runs that failed for good are reported as such elsewhere."""
    lines = []
    for record in records:
        if record.error is not None or _rate(record) <= max_rate:
            continue
        summary = record.summary
        lines.append(
            f"  {record.id}: {summary.errors} of {summary.requests} requests failed "
            f"({_rate(record):.0%}); {_commonest(store, record)}"
        )
    return lines
