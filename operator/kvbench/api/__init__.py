"""The experiment API: pydantic models that are the single source of truth for the CRD."""

from kvbench.api.engine import EngineOverrides, EngineSpec, VllmFlags
from kvbench.api.execution import (
    Cleanup,
    Execution,
    LoadGenerator,
    MetricsSource,
    Simulator,
    Timeouts,
)
from kvbench.api.experiment import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    VERSION,
    BenchmarkExperiment,
    ExperimentSpec,
    ObjectMeta,
)
from kvbench.api.files import SpecError, load_experiment, parse_experiment
from kvbench.api.load import LoadSpec, Point, Warmup
from kvbench.api.routing import RoutingArm
from kvbench.api.status import (
    AggregatePoint,
    AttemptFailure,
    Condition,
    ConditionType,
    CurrentRun,
    ExperimentPhase,
    ExperimentProgress,
    ExperimentStatus,
    LastRun,
    PodFigures,
    PodResult,
    ResultsLocation,
    RunRecord,
    RunSummary,
)
from kvbench.api.workers import Variant, WorkerPool
from kvbench.api.workload import Length, Workload

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "VERSION",
    "AggregatePoint",
    "AttemptFailure",
    "BenchmarkExperiment",
    "Cleanup",
    "Condition",
    "ConditionType",
    "CurrentRun",
    "EngineOverrides",
    "EngineSpec",
    "Execution",
    "ExperimentPhase",
    "ExperimentProgress",
    "ExperimentSpec",
    "ExperimentStatus",
    "LastRun",
    "Length",
    "LoadGenerator",
    "LoadSpec",
    "MetricsSource",
    "ObjectMeta",
    "PodFigures",
    "PodResult",
    "Point",
    "ResultsLocation",
    "RoutingArm",
    "RunRecord",
    "RunSummary",
    "Simulator",
    "SpecError",
    "Timeouts",
    "Variant",
    "VllmFlags",
    "Warmup",
    "WorkerPool",
    "Workload",
    "load_experiment",
    "parse_experiment",
]
