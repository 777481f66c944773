"""A subcommand whose optional dependency is missing says which extra brings it, instead of
a traceback; one that is there is found lazily."""

import builtins
import sys

import click
import pytest

from kvbench.cli import main


def test_predict_without_scipy_names_the_extra(monkeypatch) -> None:
    """Catches `kvbench predict` failing with a ModuleNotFoundError traceback where the user
    needs to be told to install `kvbench[predict]`."""
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name == "scipy" or name.startswith("scipy."):
            raise ModuleNotFoundError(f"No module named {name!r}", name="scipy")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    fresh = ("kvbench.cli.predict", "kvbench.predict", "scipy")
    for module in [m for m in sys.modules if m.startswith(fresh)]:
        monkeypatch.delitem(sys.modules, module)
    with pytest.raises(click.ClickException, match=r"pip install 'kvbench\[predict\]'"):
        main.get_command(click.Context(main), "predict")


def test_commands_are_found_when_asked_for() -> None:
    context = click.Context(main)
    assert main.list_commands(context) == sorted(main.list_commands(context))
    assert main.get_command(context, "run").name == "run"
    assert main.get_command(context, "no-such-command") is None
