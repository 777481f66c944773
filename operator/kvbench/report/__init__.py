"""Reports of recorded results: tables, plots and side-by-side comparisons."""

from kvbench.report.compare import Side, compare_table, compare_warnings, side_of
from kvbench.report.render import render_report

__all__ = ["Side", "compare_table", "compare_warnings", "render_report", "side_of"]
