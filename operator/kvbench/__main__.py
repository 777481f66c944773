"""`python -m kvbench`: the same command line as the `kvbench` script."""

from kvbench.cli import main

main()
