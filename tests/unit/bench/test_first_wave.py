"""bench/first_wave.py: the first concurrent requests of a run, warm-up first, in send order."""

import importlib.util
from pathlib import Path

from kvbench.loadgen.records import RequestRecord

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("first_wave", ROOT / "bench" / "first_wave.py")
first_wave = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_wave)


def _record(phase: str, index: int, start: float, ttft: float) -> RequestRecord:
    return RequestRecord(
        phase=phase, index=index, endpoint="http://router", due=start, start=start,
        end=start + 0.4, ttft=ttft, status=200,
    )  # fmt: skip


def test_the_first_wave_is_the_warm_up_sent_first_then_the_window() -> None:
    """Catches a wave taken in record order (the measured requests listed first here), or one
    that leaves out the warm-up, which is where a router places its prefixes."""
    records = [
        _record("measured", 0, 1.0, 0.03),
        _record("measured", 1, 1.1, 0.04),
        _record("warmup", 1, 0.002, 0.12),
        _record("warmup", 0, 0.001, 0.11),
        _record("warmup", 2, 0.5, 0.07),
    ]
    wave = first_wave.first_wave(records, 4)
    assert [(r.phase, r.index) for r in wave] == [
        ("warmup", 0), ("warmup", 1), ("warmup", 2), ("measured", 0)
    ]  # fmt: skip
    line = first_wave.describe("default.cache-aware.p12-c8.t1", [75, 45, 60], wave)
    assert "requests per pod [45, 60, 75]" in line
    assert "TTFT ms [30, 70, 110, 120]" in line
    assert "ended 401-1400 ms" in line
