"""The `kvbench` command line: one module per subcommand, this module only wires them.

Subcommands are imported when they are invoked (click's lazy-group pattern): a `kvbench sim`
worker or a load generator starts without importing the Kubernetes client, scipy or the
runner, which took seconds of every start."""

import importlib

import click

from kvbench.cli.version import version_option

__all__ = ["main"]

_COMMANDS = {
    "compare": "kvbench.cli.report:compare",
    "crd": "kvbench.cli.crd:crd",
    "fetch": "kvbench.cli.report:fetch",
    "loadgen": "kvbench.cli.loadgen:loadgen",
    "operator": "kvbench.cli.operator:operator",
    "plan": "kvbench.cli.plan:plan",
    "predict": "kvbench.cli.predict:predict",
    "report": "kvbench.cli.report:report",
    "run": "kvbench.cli.run:run",
    "sim": "kvbench.cli.sim:sim",
    "sweep": "kvbench.cli.sweep:sweep",
    "testcluster": "kvbench.cli.testcluster:testcluster",
    "trace": "kvbench.cli.trace:trace",
}
"""Subcommand -> the module and attribute that define it."""

_EXTRAS = {"predict": "predict"}
"""Subcommand -> the extra of kvbench that installs what it needs beyond the core."""


def _missing_extra(name: str, package: str) -> click.Command:
    """A stand-in for a subcommand whose extra is not installed: `kvbench --help` still lists
    it (and exits 0), and invoking it says which extra to install instead of a traceback."""
    install = f"pip install 'kvbench[{_EXTRAS[name]}]'"

    def refuse() -> None:
        raise click.ClickException(f"kvbench {name} needs the Python package {package}: {install}")

    return click.Command(
        name,
        callback=refuse,
        help=f"Not installed: needs {package} ({install}).",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = _COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, attribute = where.split(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as err:
            if cmd_name not in _EXTRAS or not err.name or err.name.startswith("kvbench"):
                raise
            return _missing_extra(cmd_name, err.name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@version_option
def main() -> None:
    """Run LLM-serving benchmark experiments (BenchmarkExperiment resources)."""
