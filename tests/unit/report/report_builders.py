"""Synthetic results stores for the report tests: records whose figures the tests choose, so
that every expected number is computed in the test, never taken from the report."""

from pathlib import Path

import yaml

from kvbench.api import (
    BenchmarkExperiment,
    PodResult,
    Point,
    RunRecord,
    RunSummary,
    parse_experiment,
)
from kvbench.runner import DirectoryStore, aggregate

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def example(name: str, **spec_changes) -> BenchmarkExperiment:
    """An example experiment, with top-level spec fields replaced."""
    document = yaml.safe_load((EXAMPLES / name).read_text())
    document["spec"].update(spec_changes)
    return parse_experiment(document)


def published(reference: str) -> dict:
    """The reference file as plain YAML (not through kvbench's model)."""
    return yaml.safe_load((EXAMPLES / "references" / f"{reference}.yaml").read_text())


def record(
    index: int,
    point: Point,
    trial: int,
    *,
    arm: str = "service",
    variant: str = "default",
    pods: int = 2,
    kv_tokens: int = 9360,
    preemptions: float = 0,
    restarts: int = 0,
    digest: str | None = None,
    **summary,
) -> RunRecord:
    """One recorded run; `summary` sets RunSummary fields (latency clock: simulated)."""
    summary.setdefault("requests", 200)
    summary.setdefault("latency_clock", "simulated")
    return RunRecord(
        id=f"{variant}.{arm}.{point.key}.t{trial}",
        index=index,
        arm=arm,
        variant=variant,
        point=point,
        trial=trial,
        seed=trial,
        digest=digest or f"sha256:{variant}-{point.key}-{trial}",
        pods=[
            PodResult(
                pod=f"w-{i}",
                kv_cache_tokens=kv_tokens,
                prefix_cache_queries=1000,
                prefix_cache_hits=500,
                requests=100,
                preemptions=preemptions if i == 0 else 0,
                restart_count=restarts if i == 0 else 0,
            )
            for i in range(pods)
        ],
        summary=RunSummary(**summary),
    )


def store_of(tmp_path: Path, experiment: BenchmarkExperiment, records: list[RunRecord]):
    """A results directory holding `records` and their aggregate."""
    store = DirectoryStore(tmp_path)
    store.open(experiment)
    for r in records:
        store.save_run(r)
    store.save_aggregate(aggregate(experiment.spec, store.records()))
    return store
