"""``kvbench sim``: a vLLM-compatible simulator taking ``vllm serve`` flags.

``kvbench sim --model M ...`` and ``kvbench sim serve M ...`` both work; see
``kvbench.sim.args`` for the flags and docs/simulator.md for the contract.
``python -m kvbench.sim`` is the same command without the rest of the CLI.
"""

from __future__ import annotations

import sys

import click

__all__ = ["sim"]


@click.command(
    "sim",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sim(args: tuple[str, ...]) -> None:
    """Run a vLLM-compatible simulator (`kvbench sim serve MODEL [vLLM flags]`)."""
    from kvbench.sim.args import parse_sim_args
    from kvbench.sim.main import run

    config, ignored = parse_sim_args(list(args))
    sys.exit(run(config, ignored))
