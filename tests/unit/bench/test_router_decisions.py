"""bench/router_decisions.py: a kv_aware router's logged decisions, split over the runs one
router served in their order, beside the tokens the workers reported cached."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench" / "router_decisions.py"


def _run(results: Path, index: int, run_id: str, cached: list[int | None]) -> None:
    raw = f"raw/r{index}-a1.json.gz"
    document = {
        "requests": {"cachedTokens": cached},
        "config": {"workload": {"sharedPrefix": {"prefixTokens": 32}}},
    }
    (results / "raw").mkdir(exist_ok=True)
    with gzip.open(results / raw, "wt") as f:
        json.dump(document, f)
    record = {"id": run_id, "index": index, "digest": f"sha256:{index}", "rawResults": raw}
    (results / "runs" / f"r{index}.json").write_text(json.dumps(record))


def _decision(credited: int) -> str:
    return (
        "\x1b[2m2026-12-04\x1b[0m DEBUG vllm_router_rs::policies::kv_aware: KV prefix decision "
        f'outcome="prefix_cost" worker="http://w" input_tokens=40 new_prefill_tokens='
        f"{40 - credited} credited_prefix_tokens={credited} used_binding=false\n"
    )


def test_each_run_gets_its_own_decisions_in_order(tmp_path: Path) -> None:
    """Catches decisions not split by run (the second run's reported as the first's), a missed
    line (ANSI colour around it), or the two sides' counts swapped."""
    (tmp_path / "runs").mkdir()
    _run(tmp_path, 2, "default.kv-aware.p2-c8.t1", [0, 32])
    _run(tmp_path, 3, "default.kv-aware.p4-c8.t1", [None, 16, 32])
    _run(tmp_path, 1, "default.cache-aware.p2-c8.t1", [0])  # another arm: not in this log
    log = tmp_path / "router.log"
    log.write_text("".join(_decision(c) for c in (0, 32, 0, 32, 32)))
    out = subprocess.run(
        [sys.executable, str(BENCH), str(tmp_path), str(log)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    first, second = " ".join(out.split()).split("default.kv-aware.p4-c8.t1")
    assert "p2-c8.t1: 2 decisions" in first
    assert "credited 32 prompt tokens; requests: full 1, partial 0, miss 1" in first
    assert "cached 32 prompt tokens; requests: full 1, partial 0, miss 1" in first
    assert "credited 64 prompt tokens; requests: full 2, partial 0, miss 1" in second
    assert "cached 48 prompt tokens; requests: full 1, partial 1, miss 1" in second


def test_a_log_of_other_runs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    _run(tmp_path, 0, "default.kv-aware.p2-c8.t1", [0, 32])
    log = tmp_path / "router.log"
    log.write_text(_decision(0))
    done = subprocess.run([sys.executable, str(BENCH), str(tmp_path), str(log)], text=True,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 2 and "1 decisions in the log, 2 requests" in done.stderr
