"""Several observers behind one: the runner reports to one, the operator has a status writer
and its metrics, each of which stays unaware of the other."""

from collections.abc import Sequence

from kvbench.api import AttemptFailure, ExperimentStatus, RunRecord
from kvbench.plan import Plan, PlannedRun
from kvbench.runner.experiment import RunObserver
from kvbench.runner.states import RunState

__all__ = ["FanOut"]


class FanOut:
    """A RunObserver that tells every observer it holds, in order."""

    def __init__(self, observers: Sequence[RunObserver]) -> None:
        self.observers = tuple(observers)

    def started(self, plan: Plan, done: int) -> None:
        for observer in self.observers:
            observer.started(plan, done)

    def stage(self, run: PlannedRun, state: RunState) -> None:
        for observer in self.observers:
            observer.stage(run, state)

    def recorded(self, run: PlannedRun, record: RunRecord) -> None:
        for observer in self.observers:
            observer.recorded(run, record)

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None:
        for observer in self.observers:
            observer.attempt_failed(run, failure, retrying)

    def status(self, status: ExperimentStatus) -> None:
        for observer in self.observers:
            observer.status(status)
