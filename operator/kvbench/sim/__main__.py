"""``python -m kvbench.sim [serve MODEL] [vLLM flags]``: the simulator without the kvbench CLI."""

import sys

from kvbench.sim.args import parse_sim_args
from kvbench.sim.main import run

config, ignored = parse_sim_args(sys.argv[1:])
sys.exit(run(config, ignored))
