"""The whole report of a results directory: clocks, client-bound runs, plots."""

import io
from pathlib import Path

import yaml
from rich.console import Console

from kvbench.api import Point, RunRecord, RunSummary, parse_experiment
from kvbench.report import render_report
from kvbench.runner import DirectoryStore, aggregate

ROOT = Path(__file__).resolve().parents[3]


def _record(index: int, client_bound: bool) -> RunRecord:
    return RunRecord(
        id=f"default.service.p7-c8.t{index + 1}",
        index=index,
        arm="service",
        variant="default",
        point=Point(prefixes=7, concurrency=8),
        trial=index + 1,
        seed=1,
        summary=RunSummary(requests=200, request_hit_rate=0.55, ttft_p50=0.1,
                           latency_clock="simulated", client_bound=client_bound),
    )  # fmt: skip


def test_report_names_client_bound_runs_and_the_clock(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    store = DirectoryStore(tmp_path)
    experiment = parse_experiment(document)
    store.open(experiment)
    store.save_run(_record(0, client_bound=False))
    store.save_run(_record(1, client_bound=True))
    store.save_aggregate(aggregate(experiment.spec, store.records()))
    console = Console(record=True, width=200, file=io.StringIO())
    plots = render_report(store, console, tmp_path)
    text = console.export_text()
    assert "1 of 2 runs were client-bound" in text
    assert "default.service.p7-c8.t2" in text
    assert "simulated seconds" in text
    assert "55.0 %" in text
    assert plots == [tmp_path / "hit_rate.png"], "no TTFT plot without raw results"
