"""Per-pod counters from the responses, for workers that export no prefix-cache counters.

Dynamo's mocker publishes request and preemption gauges but no prefix-cache counters; its
frontend does say which worker served each request (`nvext.worker_id`). For such pods the
window's figures are the sums over the measured responses attributed to them: prompt tokens
queried, cached tokens hit, successful requests, prompt and output tokens. The two token hit
rates of the summary then come from one source, and a note in the document says so.
"""

from kvbench.loadgen.counters import PodCounters, PodDelta
from kvbench.loadgen.records import RequestRecord

__all__ = ["RESPONSE_FIELDS", "attribute_responses"]

RESPONSE_FIELDS = ("prefix_cache_queries", "prefix_cache_hits", "requests")


def attribute_responses(
    pods: list[PodDelta],
    before: dict[str, PodCounters],
    records: list[RequestRecord],
    worker_ids: dict[str, int],
) -> tuple[list[PodDelta], list[str]]:
    """`pods` with the response-based figures filled in where the server had no counters."""
    served: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.phase == "measured" and record.ok and record.worker_id is not None:
            served.setdefault(record.worker_id, []).append(record)
    known = set(worker_ids.values())
    unattributed = sum(len(v) for k, v in served.items() if k not in known)
    notes = [f"{unattributed} responses named a worker id of no known pod"] if unattributed else []
    out = []
    for pod in pods:
        counters = before.get(pod.pod)
        missing = counters is not None and all(
            counters.values.get(field) is None for field in RESPONSE_FIELDS
        )
        if not missing or pod.pod not in worker_ids:
            out.append(pod)
            continue
        mine = served.get(worker_ids[pod.pod], [])
        out.append(
            pod.model_copy(
                update={
                    "prefix_cache_queries": float(sum(r.prompt_tokens or 0 for r in mine)),
                    "prefix_cache_hits": float(sum(r.cached_tokens or 0 for r in mine)),
                    "requests": float(len(mine)),
                    "prompt_tokens": float(sum(r.prompt_tokens or 0 for r in mine)),
                    "generation_tokens": float(sum(r.output_tokens or 0 for r in mine)),
                }
            )
        )
        notes.append(
            f"pod {pod.pod} exports no prefix-cache counters: its figures are the sums of the "
            f"{len(mine)} responses its front end attributed to it (nvext worker id "
            f"{worker_ids[pod.pod]})"
        )
    return out, notes
