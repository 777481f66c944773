"""The experiment runner, its results stores and its cluster back ends."""

from kvbench.runner.aggregate import aggregate, hit_rate_model
from kvbench.runner.experiment import ExperimentResult, ExperimentRunner, RunObserver
from kvbench.runner.states import RunStage, RunState
from kvbench.runner.stores import DirectoryStore, RunStore, StoreMismatch

__all__ = [
    "DirectoryStore",
    "ExperimentResult",
    "ExperimentRunner",
    "RunObserver",
    "RunStage",
    "RunState",
    "RunStore",
    "StoreMismatch",
    "aggregate",
    "hit_rate_model",
]
