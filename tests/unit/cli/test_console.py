"""Off a terminal, nothing is cut: `kvbench report` through a pipe prints a 30-column table
whole (rich cut its cells to `…` at a fixed width), and prose still wraps at 160 columns."""

import subprocess
import sys
from pathlib import Path

import yaml
from rich.table import Table

from kvbench.api import PodResult, RunRecord, RunSummary, parse_experiment
from kvbench.cli.common import make_console
from kvbench.plan import plan_experiment
from kvbench.runner import DirectoryStore
from kvbench.runner.aggregate import aggregate

ROOT = Path(__file__).resolve().parents[3]
CONCURRENCY = list(range(1, 31))


def _wide_results(root: Path) -> None:
    """A results directory of one run per concurrency: tables with 30 columns of figures."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["load"].update(concurrency=CONCURRENCY, trials=1)
    spec["workload"]["sharedPrefix"]["prefixes"] = [7]
    spec["routing"] = [{"name": "service", "service": {}}]
    experiment = parse_experiment(document)
    store = DirectoryStore(root)
    store.open(experiment)
    summary = RunSummary(
        requests=200, request_hit_rate=0.987, token_hit_rate=0.912, ttft_p50=0.123,
        ttft_p99=0.456, ttft_hit_p50=0.02, ttft_miss_p50=0.3, requests_per_second=12.5,
        output_tokens_per_second=800.0,
    )  # fmt: skip
    pods = [PodResult(pod=f"gpu-{i}", prefix_cache_queries=1000, prefix_cache_hits=900,
                      requests=30) for i in range(6)]  # fmt: skip
    planned = plan_experiment(experiment).runs
    fields = [{"id": r.id, "index": r.index, "arm": r.arm, "variant": r.variant,
               "point": r.point, "trial": r.trial, "seed": r.seed} for r in planned]  # fmt: skip
    records = [RunRecord(**f, summary=summary, pods=pods) for f in fields]
    for record in records:
        store.save_run(record)
    store.save_aggregate(aggregate(experiment.spec, records))


def test_a_piped_report_cuts_no_cell(tmp_path: Path) -> None:
    _wide_results(tmp_path / "results")
    command = ["report", str(tmp_path / "results"), "--out", str(tmp_path / "report")]
    piped = subprocess.run(
        [sys.executable, "-m", "kvbench", *command],
        capture_output=True,  # a pipe, not a terminal
        text=True,
        timeout=120,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert "…" not in piped.stdout
    assert all(f"conc {c} " in piped.stdout for c in CONCURRENCY)
    assert piped.stdout.count("98.7 %") >= len(CONCURRENCY)  # every hit-rate cell whole
    saved = (tmp_path / "report" / "report.txt").read_text()
    assert "…" not in saved and "conc 30 " in saved


def test_off_a_terminal_a_wide_table_is_whole_and_prose_wraps_at_160() -> None:
    console = make_console()
    assert not console.is_terminal  # pytest captures stdout
    table = Table(*(f"column {i}" for i in range(40)))
    table.add_row(*(f"value {i}" for i in range(40)))
    console.print(table)
    console.print("word " * 100)
    lines = console.export_text().splitlines()
    assert "…" not in "\n".join(lines)
    assert "column 39" in lines[1] and "value 39" in lines[3]
    assert max(len(line.rstrip()) for line in lines[5:]) <= 160
    assert console.width == 160
