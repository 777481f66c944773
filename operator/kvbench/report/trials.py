"""The trials behind each median: how many a reader must not trust, and the figures the
aggregate does not keep (preemptions, longest inter-token gap).

A median hides its inputs, so every table cell that shows one carries marks counting the
flagged trials behind it (`marks`), explained once under the table (`legend`).
"""

from collections import defaultdict
from collections.abc import Iterable
from statistics import median

from pydantic import BaseModel

from kvbench.api import RunRecord

__all__ = ["FLAG_KINDS", "Trials", "group_trials", "legend", "marks"]

FLAG_KINDS = {
    "C": "client-bound (the load generator, not the servers, set the pace)",
    "E": "had failed requests",
    "R": "had a worker pod that restarted during the run",
}
"""Mark -> what it says of a trial."""

GroupKey = tuple[str, str, str]
"""(arm, variant, point key)."""


class Trials(BaseModel):
    """The recorded trials of one arm x variant x point."""

    trials: int
    client_bound: int = 0
    errors: int = 0
    restarted: int = 0
    preemptions: float | None = None
    itl_max: float | None = None

    def counts(self) -> dict[str, int]:
        """Flagged trials per mark."""
        return {"C": self.client_bound, "E": self.errors, "R": self.restarted}

    @property
    def flagged(self) -> bool:
        return any(self.counts().values())


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def group_trials(records: list[RunRecord]) -> dict[GroupKey, Trials]:
    """Trials per (arm, variant, point key), failed runs left out (they have no figures)."""
    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.error is None:
            groups[(r.arm, r.variant, r.point.key)].append(r)
    return {
        key: Trials(
            trials=len(runs),
            client_bound=sum(1 for r in runs if r.summary.client_bound),
            errors=sum(1 for r in runs if r.summary.errors > 0),
            restarted=sum(1 for r in runs if any((p.restart_count or 0) > 0 for p in r.pods)),
            preemptions=_median([sum(p.preemptions for p in r.pods) for r in runs if r.pods]),
            itl_max=_median([r.summary.itl_max for r in runs if r.summary.itl_max is not None]),
        )
        for key, runs in groups.items()
    }


def marks(trials: Trials | None) -> str:
    """` C2/3 E1/3`: how many of the trials behind a median were flagged, per kind ('' when
    none was)."""
    if trials is None or not trials.flagged:
        return ""
    return "".join(f" {mark}{n}/{trials.trials}" for mark, n in trials.counts().items() if n)


def legend(trials: Iterable[Trials]) -> str | None:
    """One line per mark used by `trials`, for the caption of a table; None when none is."""
    counted = [t.counts() for t in trials]
    used = [m for m in FLAG_KINDS if any(c[m] for c in counted)]
    if not used:
        return None
    return "\n".join(
        f"{m}n/m: n of the m trials behind this figure {FLAG_KINDS[m]}; do not trust it as is"
        for m in used
    )
