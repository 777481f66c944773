"""`kvbench predict` on the committed real-vLLM results, with a small layout and a small
fit budget (the test checks the wiring and the output, not the fit's quality)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "bench" / "results" / "real-vllm-arms-6w"


def _layout(tmp_path: Path, arms: tuple[str, ...] = ("affinity",)) -> Path:
    """The real run's setup on 2 workers, 4 prefixes, 16 requests."""
    document = yaml.safe_load((REAL / "experiment.yaml").read_text())
    document["metadata"]["name"] = "what-if-small"
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 2
    spec["routing"] = [a for a in spec["routing"] if a["name"] in arms]
    spec["workload"]["sharedPrefix"].update(prefixes=[4], requestsPerPrefix=4, minRequests=1)
    path = tmp_path / "layout.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _args(tmp_path: Path, out: Path) -> list[str]:
    return ["predict", str(REAL), "--layout", str(_layout(tmp_path)), "--out", str(out)]


def test_predict_on_real_results(tmp_path: Path) -> None:
    """Catches the command's parts not joined up: the fit's constants, the held-out rows of
    both replayable runs (and no router arm's), and the layout's runs predicted with the
    fitted profile, ± bars, kept in prediction.json."""
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [*_args(tmp_path, out), "--budget", "5"],
    )
    assert result.exit_code == 0, result.output
    text = result.output
    assert "left out: default.cache-aware.p12-c8.t1" in text
    assert "attention_bandwidth" in text and "frontend_s" in text
    assert "default.service.p12-c8.t1" in text and "default.affinity.p12-c8.t1" in text
    assert "max |error| (bar)" in text
    assert "default.affinity.p4-c8.t1" in text and " ± " in text
    saved = json.loads((out / "prediction.json").read_text())
    assert len(saved["holdout"]["folds"]) == 2
    assert saved["fit"]["profile"]["name"] == "fitted:real-vllm-arms-6w"
    (predicted,) = saved["predictions"]
    assert predicted["error"] is None and predicted["figures"]["ttft_p50"] > 0
    layout_runs = json.loads((out / "layout" / "runs" / "r0.json").read_text())
    assert layout_runs["summary"]["ttftP50"] == predicted["figures"]["ttft_p50"]


def test_router_layout_is_refused_before_fitting(tmp_path: Path) -> None:
    """Catches a layout with a router arm accepted (it cannot run in virtual time), or
    refused only after minutes of fitting."""
    result = CliRunner().invoke(
        main,
        ["predict", str(REAL), "--layout", str(_layout(tmp_path, ("cache-aware",)))],
    )
    assert result.exit_code == 1
    assert "cannot run in virtual time" in result.output
    assert "router" in result.output
    assert "Fitted" not in result.output


def test_not_a_results_directory(tmp_path: Path) -> None:
    """Catches a traceback for a MEASURED that holds no results."""
    result = CliRunner().invoke(
        main, ["predict", str(tmp_path), "--layout", str(_layout(tmp_path))]
    )
    assert result.exit_code == 1
    assert "not a kvbench results directory" in result.output


def test_used_out_directory_is_refused(tmp_path: Path) -> None:
    """Catches a stale prediction: the runner would resume a results directory and keep the
    runs another fitted profile predicted."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "something").write_text("x")
    result = CliRunner().invoke(
        main,
        [*_args(tmp_path, out), "--no-holdout", "--budget", "1"],
    )
    assert result.exit_code == 2
    assert "not empty" in result.output
    assert "Fitted" not in result.output
