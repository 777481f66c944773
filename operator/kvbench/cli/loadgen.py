"""`kvbench loadgen --config RUN.json --out RESULT.json[.gz]`: the program a run's Job executes.

`--out-configmaps NS/NAME0,NAME1,...` (instead of or beside `--out`) writes the result into
the attempt's ConfigMaps (`kvbench.kube.results`) with the pod's service account (the
kubeconfig outside a pod), so it is kept the moment the load ends, whatever the operator does.

A progress bar on a terminal; in a Job (no TTY) a few log lines only. Request errors are
data in the result, not a failure of the command: it exits non-zero only when the config is
invalid or the run could not be carried out at all, and (128 + 15) when SIGTERM stopped it:
then the document it wrote is marked partial.

A trace workload's trace is read from `trace.file`, or from the ConfigMap the Job mounts at
`/trace`, and must have the sha256 the config names (it is refused otherwise, before anything
is sent).
"""

import logging
import os
import signal
import socket
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvbench.loadgen.config import ConfigError, load_config
from kvbench.loadgen.measure import ProgressCallback, run_sync
from kvbench.loadgen.results import LoadgenResult
from kvbench.loadgen.workload.mooncake import TraceError
from kvbench.loadgen.workload.trace_source import replayed_trace
from kvbench.report.formats import milliseconds, percent

__all__ = ["loadgen"]

log = logging.getLogger("kvbench.loadgen")


def _bar(console: Console) -> tuple[AbstractContextManager[Any], ProgressCallback]:
    bar = Progress(
        TextColumn("{task.description:>8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    tasks: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done)

    return bar, update


def _configmaps(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, list[str]] | None:
    if value is None:
        return None
    namespace, _, names = value.partition("/")
    listed = [name for name in names.split(",") if name]
    if not namespace or not listed:
        raise click.BadParameter("expected NAMESPACE/NAME0,NAME1,...", ctx, param)
    return namespace, listed


def _log_phases() -> ProgressCallback:
    def update(phase: str, done: int, total: int) -> None:
        if done == total:
            log.info("%s: %d requests done", phase, total)

    return update


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The run config (JSON, a RunConfig).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Result file: gzip when the name ends in .gz, plain JSON otherwise.",
)
@click.option(
    "--out-configmaps",
    "configmaps",
    metavar="NS/NAME0,NAME1,...",
    callback=_configmaps,
    help="Also (or instead) write the result into these ConfigMaps, created beforehand.",
)
@click.option("--quiet", is_flag=True, help="No progress bar and no log lines.")
def loadgen(
    config_path: Path, out: Path | None, configmaps: tuple[str, list[str]] | None, quiet: bool
) -> None:
    """Send one run's load and write its result document."""
    if out is None and configmaps is None:
        raise click.UsageError("give --out, --out-configmaps or both")
    try:
        config = load_config(config_path)
        trace = None
        if config.workload.trace is not None and config.trace is not None:
            trace = replayed_trace(config.workload.trace, config.trace)
    except (ConfigError, TraceError) as err:
        raise click.ClickException(str(err)) from None
    console = Console(stderr=True)
    interactive = console.is_terminal and not quiet
    logging.basicConfig(
        level=logging.WARNING if quiet or interactive else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per scrape otherwise
    bar, update = _bar(console) if interactive else (nullcontext(), _log_phases())
    log.info("run %s: %s, seed %d", config.run_id, config.point.key, config.seed)
    if configmaps is not None:
        # the Kubernetes client only where a Job writes ConfigMaps: it takes seconds to import
        from kvbench.kube.results import ResultConfigMapError, claim_attempt, in_cluster_api

        namespace, names = configmaps
        claimant = os.environ.get("POD_UID") or socket.gethostname()
        try:
            claim_attempt(in_cluster_api(), namespace, names, claimant)
        except ResultConfigMapError as err:
            raise click.ClickException(str(err)) from None
    with bar:
        result = run_sync(config, update, trace)
    kept = []
    if out is not None:
        result.save(out)
        kept.append(str(out))
    if configmaps is not None:
        from kvbench.kube.results import in_cluster_api, write_result

        namespace, names = configmaps
        write_result(in_cluster_api(), namespace, names, result.encode())
        kept.append(f"ConfigMaps {namespace}/{','.join(names)}")
    message = outcome_line(result)
    for warning in result.warnings:
        log.warning("%s", warning)
    if interactive:
        console.print(message)
    else:
        log.info("%s -> %s", message, " and ".join(kept))
    if result.partial is not None:
        sys.exit(128 + signal.SIGTERM)  # the run did not end: the Job must not read success


def outcome_line(result: LoadgenResult) -> str:
    """The run in one line: counts, both hit rates, TTFT p50 on the reported clock."""
    s = result.summary
    line = (
        f"{s.requests} requests, {s.errors} errors, "
        f"hit rate {percent(s.hit_rates.request_hit_rate)} (requests) / "
        f"{percent(s.hit_rates.token_hit_rate_counters)} (tokens, counters), "
        f"TTFT p50 {milliseconds(s.reported.ttft.p50)} ms ({s.latency_clock} clock)"
        f"{', CLIENT-BOUND' if result.client.client_bound else ''}"
    )
    if result.counters.error:
        line += f"; counters not read: {result.counters.error}"
    return line
