"""Reports of a results directory: tables, plots and side-by-side comparisons."""

from kvbench.report.compare import Side, compare_table, parse_side
from kvbench.report.render import render_report

__all__ = ["Side", "compare_table", "parse_side", "render_report"]
