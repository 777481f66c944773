"""The local back end: simulated workers, arms and the load generator as processes on loopback.

Everything it starts it also stops: on success, on failure and on Ctrl-C (`close` runs from
the runner's `finally`, and every child gets a parent-death signal).
"""

import asyncio
import hashlib
import random
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from kvbench.api import EngineSpec, ExperimentSpec, RoutingArm
from kvbench.api.units import parse_duration
from kvbench.plan import PlannedRun
from kvbench.runner.cluster.base import Cluster, LoadOutcome, Target, WorkerInfo
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.arms import OpenArm, open_local_arm
from kvbench.runner.cluster.local.load import run_local_load
from kvbench.runner.cluster.local.preflight import local_problems
from kvbench.runner.cluster.local.workers import LocalWorker, start_worker

if TYPE_CHECKING:
    from kvbench.dynamo import DynamoDeployment

__all__ = ["LocalCluster"]


class LocalCluster(Cluster):
    """Workers are `kvbench sim` processes; logs and run configs go under `work_dir`."""

    def __init__(self, work_dir: Path, block: LoopbackBlock | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.block = block or LoopbackBlock()
        self._workers: list[LocalWorker] = []
        self._dynamo: DynamoDeployment | None = None
        self._arm: OpenArm | None = None
        self._starts = 0

    def problems(self, spec: ExperimentSpec) -> list[str]:
        return local_problems(spec)

    async def start_workers(
        self, spec: ExperimentSpec, variant: str, engine: EngineSpec, arm: RoutingArm
    ) -> list[WorkerInfo]:
        await self._stop_workers()
        self._starts += 1
        if arm.external is not None:
            return []
        if arm.dynamo is not None:
            try:
                from kvbench.runner.cluster.local.dynamo import start_dynamo
            except ImportError as err:
                raise RuntimeError(
                    f"arm {arm.name} needs NVIDIA Dynamo: run scripts/install-dynamo.sh ({err})"
                ) from None
            scratch = self.work_dir / "dynamo" / f"start-{self._starts:03d}-{arm.name}"
            self._dynamo, workers = await start_dynamo(
                spec, engine, arm.dynamo, self.block.address(), scratch
            )
            return workers
        log_dir = self.work_dir / "logs" / f"start-{self._starts:03d}-{variant}"
        timeout = parse_duration(spec.timeouts.workers_ready)
        names = [(pool, f"{pool.name}-{i}") for pool in spec.workers for i in range(pool.replicas)]
        results = await asyncio.gather(
            *(
                start_worker(
                    spec,
                    engine,
                    pool,
                    name,
                    self.block,
                    self._seed(spec.load.seed, name),
                    log_dir,
                    timeout,
                )
                for pool, name in names
            ),
            return_exceptions=True,
        )
        self._workers = [r for r in results if isinstance(r, LocalWorker)]
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self._stop_workers()
            raise failures[0]
        return [w.info for w in self._workers]

    def _seed(self, seed: int, name: str) -> int:
        """Each start of each worker gets its own seed (capacity jitter differs per start)."""
        text = f"{seed}/{self._starts}/{name}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")

    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        async with httpx.AsyncClient() as client:
            for worker in workers:
                response = await client.post(f"{worker.base_url}/reset_prefix_cache")
                if response.status_code != 200:
                    raise RuntimeError(
                        f"{worker.name}: /reset_prefix_cache answered {response.status_code}: "
                        f"{response.text[:200]}"
                    )

    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo]
    ) -> Target:
        await self.close_arm()
        if arm.dynamo is not None:
            if self._dynamo is None:
                raise RuntimeError(f"arm {arm.name}: the Dynamo deployment is not running")
            return Target(arm=arm.name, url=self._dynamo.base_url, nvext=True)
        self._arm = await open_local_arm(
            arm,
            workers,
            self.block,
            self.work_dir / "logs",
            parse_duration(spec.timeouts.workers_ready),
            random.Random(f"{spec.load.seed}/{arm.name}/{self._starts}"),
        )
        return self._arm.target

    async def close_arm(self) -> None:
        if self._arm is not None:
            arm, self._arm = self._arm, None
            await arm.close()

    async def run_load(
        self, spec: ExperimentSpec, run: PlannedRun, target: Target, workers: list[WorkerInfo]
    ) -> LoadOutcome:
        return await run_local_load(spec, run, target, workers, self.work_dir / "loadgen")

    async def worker_logs(self, worker: WorkerInfo) -> str:
        for local in self._workers:
            if local.info.name == worker.name:
                return local.process.log_path.read_text(errors="replace")
        raise KeyError(worker.name)

    async def _stop_workers(self) -> None:
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.stop() for w in workers))
        if self._dynamo is not None:
            deployment, self._dynamo = self._dynamo, None
            await asyncio.to_thread(deployment.stop)

    async def close(self) -> None:
        await self.close_arm()
        await self._stop_workers()
