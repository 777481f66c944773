"""`kvbench sweep`'s options: bad input refused before any run, with the option named."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[3]
ARTICLE_002 = str(ROOT / "examples" / "prefix-cache-service.yaml")


def _sweep(tmp_path: Path, *options: str):
    args = ["sweep", ARTICLE_002, "--out", str(tmp_path / "out"), *options]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    ("options", "code", "message"),
    [
        (["--workers", "2", "--pool", "gpu24", "--arms", "service,kv-aware"], 2, "virtual time"),
        (["--workers", "2", "--pool", "gpu24", "--arms", "svc"], 2, "not an arm"),
        (["--workers", "", "--pool", "gpu24"], 2, "--workers"),
        (["--workers", "2,0", "--pool", "gpu24"], 2, "from 1 to"),
        (["--workers", "2", "--pool", "gpu24", "--kv-tokens", "lots"], 2, "--kv-tokens"),
        (["--workers", "2", "--pool", "gpu24", "--kv-bytes", "1Gi", "--kv-tokens", "9k"], 1,
         "one of the two"),
        (["--workers", "2", "--pool", "gpu24", "--prefixes", "2,2"], 2, "twice"),
        (["--workers", "2"], 1, "--pool"),
        (["--workers", "2", "--pool", "gpu24", "--kv-tokens", "1k"], 1, "maxModelLen"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_any_run(
    tmp_path: Path, options: list[str], code: int, message: str
) -> None:
    """Catches: input accepted that fails only after minutes of runs (or never, giving an
    empty table), and an error that does not name what to change."""
    result = _sweep(tmp_path, *options)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_the_grid_and_its_cost(tmp_path: Path) -> None:
    """Catches: the grid the command reports differing from the one it would run (the run
    count is what a user budgets by)."""
    result = _sweep(
        tmp_path,
        *("--workers", "2,4", "--pool", "gpu8", "--kv-tokens", "4k,20k"),
        *("--prefixes", "2,48", "--trials", "1", "--dry-run"),
    )
    assert result.exit_code == 0, result.output
    assert "workers [2, 4] x KV tokens [4096, 20480] x prefixes [2, 48]" in result.output
    assert "concurrency 16, 1 trial(s): 16 runs in virtual time" in result.output
    assert "pools left out: gpu24" in result.output
    assert not (tmp_path / "out").exists()
