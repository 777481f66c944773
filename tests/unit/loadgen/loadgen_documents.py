"""Real-looking result documents built without a server: the article's workload, rows that
look like a real run's, and the document around them."""

import random
from datetime import UTC, datetime

from kvbench.loadgen.columns import RequestColumns
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.records import RequestRecord, SimTiming
from kvbench.loadgen.results import Conditions, CounterReport, LoadgenResult, Window, versions
from kvbench.loadgen.summary import summarize_records

__all__ = ["make_record", "make_result", "make_rows", "make_sim"]

CONFIG = RunConfig.model_validate(
    {
        "model": "m",
        "target": {"kind": "url", "url": "http://svc:8000"},
        "workload": {"sharedPrefix": {"prefixes": [12]}},
        "point": {"concurrency": 32, "prefixes": 12},
        "seed": 1,
    }
)


def make_record(i: int, rng: random.Random, phase: str = "measured") -> RequestRecord:
    """A real-looking request of the article's workload: 2,371 prompt tokens, 10-100 out."""
    output = rng.randint(10, 100)
    start = i * 0.05 + rng.random() * 0.01
    ttft = rng.uniform(0.02, 0.4)
    gaps = [rng.gauss(0.012, 0.002) for _ in range(output - 1)]
    hit = rng.random() < 0.6
    failed = rng.random() < 0.01
    return RequestRecord(
        phase=phase, index=i, group=i % 12, endpoint="http://svc:8000", due=start,
        start=start, end=start + ttft + sum(gaps), ttft=None if failed else ttft,
        e2e=None if failed else ttft + sum(gaps), itl=[] if failed else gaps,
        prompt_tokens=2371, output_tokens=0 if failed else output,
        cached_tokens=2032 if hit else 0, status=500 if failed else 200,
        error_kind="http" if failed else None, error="boom" if failed else None,
    )  # fmt: skip


def make_sim(rng: random.Random) -> SimTiming:
    return SimTiming(worker="sim-0", arrival=rng.uniform(0, 60), ttft=0.1, e2e=0.9, queue=0.01,
                     itl=[0.0123456789, 0.0125], preemptions=0, cached_tokens=2032,
                     time_scale=0.0)  # fmt: skip


def make_result(records: list[RequestRecord]) -> LoadgenResult:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    conditions = Conditions(
        run_id="run", model="m", api="completions", workload="shared_prefix",
        prompt_format="tokens", point=CONFIG.point, concurrency=32, seed=1, digest="sha256:0",
        warmup_requests=12, measured_requests=len(records) - 12, schedule="closed",
        target="http://svc:8000", connection="new", versions=versions("asyncio"),
    )  # fmt: skip
    return LoadgenResult(
        conditions=conditions,
        window=Window(started_at=now, finished_at=now, wall_seconds=60.0, start=0.0, end=60.0),
        summary=summarize_records(records, None, 60.0),
        client=ClientHealth(),
        counters=CounterReport(source="direct", pods=[PodDelta(pod="sim-0", requests=3)]),
        requests=RequestColumns.from_records(records),
        config=CONFIG,
    )


def make_rows(requests: int, seed: int = 0) -> list[RequestRecord]:
    rng = random.Random(seed)
    warm = [make_record(i, rng, "warmup") for i in range(12)]
    return warm + [make_record(i, rng) for i in range(requests)]
