"""The load generator as the local back end runs it: `kvbench loadgen` in its own process,
exactly as the Kubernetes Job runs it, so the client never shares a core's event loop with the
runner or the balancer."""

import asyncio
import sys
from pathlib import Path

from kvbench.api import ExperimentSpec
from kvbench.loadgen.config import DirectMetrics, PrefixAffinityTarget, RunConfig, UrlTarget
from kvbench.plan import PlannedRun
from kvbench.runner.cluster.base import LoadOutcome, Target, WorkerInfo
from kvbench.runner.outcome import outcome_from_result

__all__ = ["build_run_config", "run_local_load"]


def build_run_config(
    spec: ExperimentSpec, run: PlannedRun, target: Target, workers: list[WorkerInfo]
) -> RunConfig:
    """The load generator's config for one run of the plan."""
    engine = spec.engines()[run.variant]
    if target.url is not None:
        destination: UrlTarget | PrefixAffinityTarget = UrlTarget(
            url=target.url, nvext=target.nvext
        )
    else:
        by_name = {w.name: w.base_url for w in workers if w.base_url in target.pod_urls}
        destination = PrefixAffinityTarget(pods=by_name)
    return RunConfig(
        run_id=run.id,
        model=engine.served_model_name or engine.model,
        target=destination,
        workload=spec.workload,
        point=run.point,
        seed=run.seed,
        warmup=spec.load.warmup,
        connection=spec.load.connection,
        request_timeout=spec.load.request_timeout,
        time_scale=spec.simulator.time_scale,
        metrics=DirectMetrics(
            pods={w.name: w.metrics_url for w in workers},
            worker_ids={
                w.name: w.frontend_worker_id for w in workers if w.frontend_worker_id is not None
            },
        )
        if workers
        else None,
    )


async def run_local_load(
    spec: ExperimentSpec,
    run: PlannedRun,
    target: Target,
    workers: list[WorkerInfo],
    work_dir: Path,
) -> LoadOutcome:
    """Run `kvbench loadgen` for one run and read its result document."""
    work_dir.mkdir(parents=True, exist_ok=True)
    config_path = work_dir / f"{run.id}.config.json"
    result_path = work_dir / f"{run.id}.result.json"
    log_path = work_dir / f"{run.id}.log"
    config_path.write_text(build_run_config(spec, run, target, workers).model_dump_json(indent=2))
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kvbench",
            "loadgen",
            "--config",
            str(config_path),
            "--out",
            str(result_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            code = await process.wait()
        except BaseException:
            process.kill()
            await process.wait()
            raise
    if code != 0 or not result_path.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"load generator failed for run {run.id} (exit {code}):\n{tail}")
    return outcome_from_result(result_path.read_text())
