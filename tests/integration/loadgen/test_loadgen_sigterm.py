"""`kvbench loadgen` told to stop (SIGTERM, as a Job's deadline or a deleted pod tells it):
it writes every request it sent, the ones in flight as `cancelled` errors, marks the document
partial and exits 143, so nothing measured is lost and nothing partial passes for a run."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from loadgen_helpers import small_config

from kvbench.loadgen.results import read_result


def test_sigterm_in_the_window_leaves_a_partial_document_and_exit_143(
    start_sim, tmp_path: Path
) -> None:
    sim = start_sim("sim-0", "--time-scale", "0.5")
    config = small_config(
        sim.url,
        workload={"sharedPrefix": {"prefixes": [2], "requestsPerPrefix": 1, "minRequests": 60}},
        point={"concurrency": 4, "prefixes": 2},
        warmup={"requestsPerPrefix": 1},
        timeScale=0.5,
    )
    path, out = tmp_path / "run.json", tmp_path / "result.json.gz"
    path.write_text(config.model_dump_json())
    process = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "loadgen", "--config", str(path), "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:  # the warm-up is logged when it is done
        if "warmup: 2 requests done" in line:
            break
    time.sleep(2.0)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 128 + signal.SIGTERM
    result = read_result(out.read_bytes())
    measured = [r for r in result.records() if r.phase == "measured"]
    assert result.partial is not None and "measured window" in result.partial
    assert 0 < len(measured) < 60, "some requests sent, not all"
    cancelled = [r for r in measured if r.error_kind == "cancelled"]
    assert cancelled, "the requests in flight are kept, as errors"
    assert result.summary.errors == len([r for r in measured if r.error_kind is not None])
    assert any(w.startswith("partial:") for w in result.warnings)
