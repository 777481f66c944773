"""A terminal progress bar for the experiment runner: run i of N, the run under way, an ETA."""

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvbench.api import RunRecord
from kvbench.plan import PlannedRun

__all__ = ["RunProgress"]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


class RunProgress:
    """Implements the runner's Progress protocol on a rich progress bar."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("[bold]runs"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        )
        self.task = None

    def started(self, total: int, done: int) -> None:
        if done:
            self.console.print(f"resuming: {done} of {total} runs already recorded")
        self.bar.start()
        self.task = self.bar.add_task("", total=total, completed=done)

    def run_started(self, run: PlannedRun) -> None:
        self.bar.update(self.task, description=run.id)

    def run_finished(self, run: PlannedRun, record: RunRecord) -> None:
        s = record.summary
        self.bar.console.print(
            f"{run.id}: {s.requests} requests, {s.errors} errors, hit rate "
            f"{_percent(s.request_hit_rate)} (tokens {_percent(s.token_hit_rate)})"
            + (" [yellow]client-bound[/yellow]" if s.client_bound else "")
        )
        self.bar.advance(self.task)

    def stop(self) -> None:
        self.bar.stop()
