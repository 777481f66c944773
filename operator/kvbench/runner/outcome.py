"""Reading the load generator's result document into what the runner records.

Both back ends end a run with the same document (a file locally, the Job's output on a
cluster), so this is the one place that knows its shape.
"""

from kvbench.loadgen.results import LoadgenResult
from kvbench.runner.cluster.base import LoadOutcome

__all__ = ["outcome_from_result", "ttft_samples"]


def outcome_from_result(document: str) -> LoadOutcome:
    """The summary, per-pod counters and digest of a run, keeping the document as raw results."""
    result = LoadgenResult.model_validate_json(document)
    return LoadOutcome(
        summary=result.run_summary,
        pods=result.counters.pods or [],
        digest=result.conditions.digest,
        raw_document=document,
    )


def ttft_samples(document: str) -> list[float]:
    """TTFT of every successful measured request, on the clock the summary uses (the
    simulator's own when it reported one)."""
    result = LoadgenResult.model_validate_json(document)
    simulated = result.run_summary.latency_clock == "simulated"
    samples = []
    for record in result.requests:
        if record.phase != "measured" or not record.ok:
            continue
        ttft = record.sim.ttft if simulated and record.sim is not None else record.ttft
        if ttft is not None:
            samples.append(ttft)
    return samples
