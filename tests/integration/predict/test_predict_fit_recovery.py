"""The fit against virtual "measurements" made with a known profile: it must find the
constants back, because the replay is the very model that made the figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvbench.api import load_experiment
from kvbench.plan import plan_experiment
from kvbench.predict.fit import base_profile, fit_profile, with_constants
from kvbench.predict.measured import MeasuredRun
from kvbench.predict.replay import replay

ROOT = Path(__file__).resolve().parents[3]
MEASURED = ROOT / "bench" / "results" / "real-vllm-arms-6w" / "experiment.yaml"

TRUE = {"flops": 0.25, "attention_bandwidth": 1.0, "step_overhead_s": 3.0, "frontend_s": 2.5}
"""The known profile: the roofline's constants times these (attention bandwidth left as it is:
with prompts this short the KV reads cost a few % of a step, too little to pin it)."""


def small_experiment(tmp_path: Path):
    """The committed real experiment's setup, cut down: 2 workers, 4 prefixes, 16 requests."""
    document = yaml.safe_load(MEASURED.read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 2
    spec["routing"] = [a for a in spec["routing"] if a["name"] in ("service", "affinity")]
    spec["workload"]["sharedPrefix"].update(
        prefixes=[4],
        prefixTokens=1500,
        suffixTokens=200,
        outputTokens=16,
        requestsPerPrefix=4,
        minRequests=1,
    )
    spec["load"]["concurrency"] = [4]
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_experiment(path)


def test_fit_recovers_known_constants(tmp_path: Path) -> None:
    """Catches a fit that does not move (a zero finite-difference Jacobian: scipy's default
    step at x = 0 is 1e-8, under the discrete engine's staircase), residuals of the wrong
    sign, or a constant that never reaches the replayed workers."""
    experiment = small_experiment(tmp_path)
    base = base_profile(experiment)
    start = base.model_dump()
    start["attention_bandwidth"] = base.attention_bandwidth or base.bandwidth
    truth = {k: start[k] * f for k, f in TRUE.items()}
    known = with_constants(base, truth, "known", ())
    runs = [
        MeasuredRun(run=run, figures=replay(experiment, run, known))
        for run in plan_experiment(experiment).runs
    ]
    assert runs[0].figures.ttft_p50 is not None
    before = replay(experiment, runs[0].run, None).ttft_p50
    assert before is not None and abs(before / runs[0].figures.ttft_p50 - 1) > 0.3

    result = fit_profile(experiment, runs, base, budget=20)

    assert result.rms_log_error < 0.05
    for name in ("flops", "step_overhead_s", "frontend_s"):
        assert result.constants[name] == pytest.approx(truth[name], rel=0.25), name
