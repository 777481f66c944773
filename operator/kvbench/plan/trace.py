"""What a trace must satisfy for an experiment to replay it, checked before anything starts:
the rows a spec cannot judge until the trace is read."""

from kvbench.api import ExperimentSpec
from kvbench.loadgen.workload.mooncake import Trace

__all__ = ["trace_problems"]


def trace_problems(spec: ExperimentSpec, trace: Trace) -> list[str]:
    """Why `spec` cannot replay `trace` (empty when it can), each naming the field or row."""
    problems = []
    warmups = spec.load.warmup.requests
    if warmups >= len(trace.rows):
        problems.append(
            f"spec.load.warmup.requests: {warmups} warm-up rows leave none of the "
            f"{len(trace.rows)} rows of {trace.source} to measure"
        )
    for variant, engine in spec.engines().items():
        if engine.max_model_len is None:
            continue
        for row, line in zip(trace.rows, trace.lines, strict=True):
            if row.input_length + row.output_length > engine.max_model_len:
                problems.append(
                    f"spec.workload.trace: {trace.source} line {line} holds "
                    f"{row.input_length} + {row.output_length} tokens, above the "
                    f"engine.maxModelLen {engine.max_model_len} of variant {variant!r}: vLLM "
                    "would reject it (raise maxModelLen, or cut the trace with maxRows)"
                )
                break
    return problems
