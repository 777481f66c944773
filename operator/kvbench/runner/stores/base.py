"""The results store interface: one experiment's run states, records, raw results, aggregate.

A store is keyed by the experiment's identity (locally its resolved spec, on Kubernetes the
resource's UID) and is the source of truth a resumed runner reads: nothing the runner needs
after a restart lives only in memory. Reads come from memory after `open`; writes go through
at once, so a record is durable when `save_run` returns.
"""

from abc import ABC, abstractmethod

from kvbench.api import AggregatePoint, BenchmarkExperiment, ResultsLocation, RunRecord
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.states import RunState

__all__ = ["RunStore", "StoreMismatch"]


class StoreMismatch(RuntimeError):
    """The store holds results of a different experiment, or of an unknown format."""


class RunStore(ABC):
    """Where an experiment's results are kept."""

    @abstractmethod
    def open(self, experiment: BenchmarkExperiment) -> None:
        """Start an empty store, or resume one that holds this very experiment (else raise
        StoreMismatch); loads what it holds into memory."""

    @abstractmethod
    def experiment(self) -> BenchmarkExperiment:
        """The experiment the store holds."""

    @abstractmethod
    def states(self) -> dict[int, RunState]:
        """The last written state of every run that has one, by run index."""

    @abstractmethod
    def save_state(self, state: RunState) -> None:
        """Persist a run's state (before the side effect it announces)."""

    @abstractmethod
    def save_raw(self, names: ChildNames, document: bytes) -> str:
        """Keep an attempt's load generator result document; where it is (for `read_raw`)."""

    @abstractmethod
    def read_raw(self, where: str) -> bytes:
        """A result document kept by `save_raw`."""

    @abstractmethod
    def save_run(self, record: RunRecord) -> None:
        """Record a run's outcome (figures, or its failure): the run is done once this returns."""

    @abstractmethod
    def records(self) -> list[RunRecord]:
        """Every recorded run, in plan order."""

    @abstractmethod
    def save_aggregate(self, points: list[AggregatePoint]) -> None:
        """Replace the medians over trials."""

    @abstractmethod
    def aggregate(self) -> list[AggregatePoint]:
        """The medians over trials as last saved."""

    @abstractmethod
    def location(self) -> ResultsLocation:
        """Where a user finds the full records."""
