"""The experiment runner and its cluster back ends."""

from kvbench.runner.aggregate import aggregate, capacity_model
from kvbench.runner.experiment import ExperimentRunner, Progress
from kvbench.runner.store import ResultsStore, StoreMismatch

__all__ = [
    "ExperimentRunner",
    "Progress",
    "ResultsStore",
    "StoreMismatch",
    "aggregate",
    "capacity_model",
]
