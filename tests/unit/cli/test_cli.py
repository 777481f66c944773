"""The command line: every command is wired and reads experiment files."""

from pathlib import Path

from click.testing import CliRunner

from kvbench import __version__
from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_version_and_commands() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output
    help_text = CliRunner().invoke(main, ["--help"]).output
    for command in ("crd", "plan", "run"):
        assert command in help_text


def test_missing_file_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["plan", "no-such-file.yaml"])
    assert result.exit_code == 2
    assert "does not exist" in result.output
