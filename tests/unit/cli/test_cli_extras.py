"""A subcommand whose optional dependency is missing says which extra brings it, instead of
a traceback; one that is there is found lazily."""

import builtins
import sys

import click
import pytest
from click.testing import CliRunner

from kvbench.cli import main


@pytest.fixture
def no_scipy(monkeypatch) -> None:
    """scipy cannot be imported, and nothing that imported it is cached."""
    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "scipy" or name.startswith("scipy."):
            raise ModuleNotFoundError(f"No module named {name!r}", name="scipy")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    fresh = ("kvbench.cli.predict", "kvbench.predict", "scipy")
    for module in [m for m in sys.modules if m.startswith(fresh)]:
        monkeypatch.delitem(sys.modules, module)


@pytest.mark.usefixtures("no_scipy")
def test_predict_without_scipy_names_the_extra() -> None:
    """Catches `kvbench predict` failing with a ModuleNotFoundError traceback where the user
    needs to be told to install `kvbench[predict]`."""
    done = CliRunner().invoke(main, ["predict", "results", "--layout", "x.yaml"])
    assert done.exit_code == 1, done.output
    assert "kvbench predict needs the Python package scipy" in done.output
    assert "pip install 'kvbench[predict]'" in done.output


@pytest.mark.usefixtures("no_scipy")
def test_help_without_scipy_lists_predict_as_not_installed() -> None:
    """Catches `kvbench --help` failing (exit 1) in an image without the predict extra, as it
    did when listing the commands imported predict's module."""
    done = CliRunner().invoke(main, ["--help"])
    assert done.exit_code == 0, done.output
    assert "sim" in done.output
    assert "Not installed: needs scipy" in done.output


def test_commands_are_found_when_asked_for() -> None:
    context = click.Context(main)
    assert main.list_commands(context) == sorted(main.list_commands(context))
    assert main.get_command(context, "run").name == "run"
    assert main.get_command(context, "no-such-command") is None
