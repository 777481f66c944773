"""Reading the measured side: which runs of a results directory are replayable, and clear
errors for inputs that cannot be fitted on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbench.predict.measured import MeasuredError, load_measured

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "bench" / "results" / "real-vllm-arms-6w"


def test_router_arms_are_left_out_and_said_to_be() -> None:
    """Catches router arms' runs slipping into the fit (virtual time would replay them as
    something else) or being dropped silently."""
    measured = load_measured(REAL)
    assert [r.run.id for r in measured.runs] == [
        "default.service.p12-c8.t1",
        "default.affinity.p12-c8.t1",
    ]
    assert len(measured.skipped) == 2
    assert all("not modelled in virtual time" in s for s in measured.skipped)
    service = measured.runs[0]
    assert service.run.index == 0  # the plan's index: the Service's seed depends on it
    assert service.figures.ttft_p50 == pytest.approx(0.0645385)
    assert service.group == "default.service.p12-c8"


def test_not_a_results_directory(tmp_path: Path) -> None:
    """Catches a traceback (or an empty fit) for a directory that holds no results."""
    with pytest.raises(MeasuredError, match="not a kvbench results directory"):
        load_measured(tmp_path)


def test_no_modelled_arm(tmp_path: Path) -> None:
    """Catches a fit on nothing when every run is a router arm's."""
    copy = tmp_path / "routers-only"
    shutil.copytree(REAL, copy)
    for index in (0, 3):  # the service and affinity runs
        (copy / "runs" / f"r{index}.json").unlink()
    with pytest.raises(MeasuredError, match="no run of an arm virtual time models"):
        load_measured(copy)
