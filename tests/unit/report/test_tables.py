"""Report tables and comparisons are pure functions of recorded runs."""

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from kvbench.api import PodResult, Point, RunRecord, RunSummary, parse_experiment
from kvbench.report import Side, compare_table
from kvbench.report.tables import (
    hit_miss_table,
    hit_rate_table,
    latency_clock,
    per_pod_table,
    ttft_table,
)
from kvbench.runner import aggregate

ROOT = Path(__file__).resolve().parents[3]
SPEC = parse_experiment(
    yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
).spec


def _record(arm: str, prefixes: int, trial: int, hit: float, clock: str = "simulated"):
    return RunRecord(
        id=f"default.{arm}.p{prefixes}-c8.t{trial}",
        index=trial,
        arm=arm,
        variant="default",
        point=Point(prefixes=prefixes, concurrency=8),
        trial=trial,
        seed=1,
        pods=[
            PodResult(
                pod=f"gpu-{i}",
                kv_cache_tokens=9360,
                prefix_cache_queries=1000,
                prefix_cache_hits=1000 * hit * (i + 1) / 2,
                requests=100 + i,
            )
            for i in range(2)
        ],
        summary=RunSummary(
            requests=200,
            request_hit_rate=hit,
            token_hit_rate=0.8 * hit,
            ttft_p50=0.05 + trial / 1000,
            ttft_p99=0.5,
            ttft_hit_p50=0.04,
            ttft_miss_p50=0.11,
            requests_per_second=10.0,
            output_tokens_per_second=640.0,
            latency_clock=clock,
        ),
    )


RECORDS = [
    _record(arm, p, t, hit)
    for arm, p, hits in (("service", 7, (0.50, 0.56, 0.60)), ("affinity", 7, (0.9, 0.95, 1.0)))
    for t, hit in enumerate(hits, start=1)
]


def _text(renderable) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_hit_rate_table_shows_medians_and_the_model() -> None:
    text = _text(hit_rate_table(SPEC, aggregate(SPEC, RECORDS)))
    assert "56.0 % | 44.8 %" in text
    assert "95.0 % | 76.0 %" in text
    [row] = [line for line in text.splitlines() if "service / default" in line]
    cells = [cell.strip() for cell in row.split("│")]
    assert cells[3] == "uniform"
    model = float(cells[-3].removesuffix(" %"))  # the service model's column
    assert model == pytest.approx(100 * 9360 / 2371 / 7, abs=1.0)
    affinity = float(cells[-2].removesuffix(" %"))  # the run's 2 workers, 4 and 3 prefixes
    assert 85 < affinity < 100


def test_latency_tables_say_which_clock() -> None:
    points = aggregate(SPEC, RECORDS)
    assert latency_clock(RECORDS) == "simulated"
    assert latency_clock([_record("service", 7, 1, 0.5, clock="wall")]) == "wall"
    assert "simulated ms" in _text(ttft_table(points, "simulated"))
    assert "52 / 500" in _text(ttft_table(points, "simulated"))
    assert "2.8x" in _text(hit_miss_table(RECORDS, "simulated"))


def test_per_pod_table_lists_every_pod() -> None:
    text = _text(per_pod_table(RECORDS))
    assert "gpu-0" in text and "gpu-1" in text
    assert "28.0 %, 100 req" in text and "56.0 %, 101 req" in text


def test_compare_two_arms() -> None:
    points = aggregate(SPEC, RECORDS)
    a = Side(label="x@service", points=[p for p in points if p.arm == "service"])
    b = Side(label="x@affinity", points=[p for p in points if p.arm == "affinity"])
    text = _text(compare_table(a, b))
    assert "default / p7-c8" in text
    assert "+39.0 pt" in text
