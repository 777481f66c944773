"""The run planner: an experiment spec expanded into its ordered, deterministic runs."""

from kvbench.plan.estimate import DurationModel, estimate_local_seconds, estimate_run_seconds
from kvbench.plan.planner import Plan, PlannedRun, plan_experiment, points_of, sequence_seed

__all__ = [
    "DurationModel",
    "Plan",
    "PlannedRun",
    "estimate_local_seconds",
    "estimate_run_seconds",
    "plan_experiment",
    "points_of",
    "sequence_seed",
]
