"""A terminal progress bar for the experiment runner: run i of N, the run under way, an ETA."""

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kvbench.api import AttemptFailure, ExperimentStatus, RunRecord
from kvbench.plan import Plan, PlannedRun
from kvbench.report.formats import percent
from kvbench.runner import DirectoryStore, RunState

__all__ = ["RunProgress"]


class RunProgress:
    """The runner's observer on a terminal: a progress bar, a line per run, and the status
    the resource would show written beside the results (`status.json`)."""

    def __init__(self, console: Console, store: DirectoryStore) -> None:
        self.console = console
        self.store = store
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
        self.task: TaskID | None = None

    def started(self, plan: Plan, done: int) -> None:
        total = len(plan.runs)
        if done:
            self.console.print(f"resuming: {done} of {total} runs already recorded")
        self.bar.start()
        self.task = self.bar.add_task("", total=total, completed=done)

    def stage(self, run: PlannedRun, state: RunState) -> None:
        if self.task is not None:
            attempt = f" (attempt {state.attempt})" if state.attempt > 1 else ""
            self.bar.update(self.task, description=f"{run.id}{attempt}: {state.stage.value}")

    def recorded(self, run: PlannedRun, record: RunRecord) -> None:
        s = record.summary
        self.bar.console.print(
            f"{run.id}: {s.requests} requests, {s.errors} errors, hit rate "
            f"{percent(s.request_hit_rate)} (tokens {percent(s.token_hit_rate)})"
            + (" [yellow]client-bound[/yellow]" if s.client_bound else "")
        )
        if self.task is not None:
            self.bar.advance(self.task)

    def attempt_failed(self, run: PlannedRun, failure: AttemptFailure, retrying: bool) -> None:
        first_line = failure.message.splitlines()[0] if failure.message else failure.reason
        then = "trying again on fresh workers" if retrying else "[red]run failed[/red]"
        self.bar.console.print(
            f"{run.id}: attempt {failure.attempt} failed ({failure.reason}: {first_line}); {then}"
        )
        if not retrying and self.task is not None:
            self.bar.advance(self.task)

    def status(self, status: ExperimentStatus) -> None:
        self.store.save_status(status)

    def stop(self) -> None:
        self.bar.stop()
