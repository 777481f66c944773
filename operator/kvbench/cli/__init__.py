"""The `kvbench` command line: one module per subcommand, this module only wires them."""

import click

from kvbench.cli.crd import crd
from kvbench.cli.loadgen import loadgen
from kvbench.cli.operator import operator
from kvbench.cli.plan import plan
from kvbench.cli.predict import predict
from kvbench.cli.report import compare, fetch, report
from kvbench.cli.run import run
from kvbench.cli.sim import sim
from kvbench.cli.sweep import sweep
from kvbench.cli.testcluster import testcluster
from kvbench.cli.trace import trace
from kvbench.cli.version import version_option

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
def main() -> None:
    """Run LLM-serving benchmark experiments (BenchmarkExperiment resources)."""


main.add_command(crd)
main.add_command(loadgen)
main.add_command(operator)
main.add_command(plan)
main.add_command(predict)
main.add_command(report)
main.add_command(compare)
main.add_command(fetch)
main.add_command(run)
main.add_command(sim)
main.add_command(sweep)
main.add_command(testcluster)
main.add_command(trace)
