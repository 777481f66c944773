"""The local back end: workers (`kvbench sim`, or real vLLM on a GPU machine: a launcher, see
`launcher.py`), arms and the load generator as processes on loopback.

Its processes behave like a cluster's pods: they outlive the runner (a killed `kvbench run`
leaves them for the next one to adopt or stop), every one is registered on disk the moment it
starts (`children.py`), and `teardown` stops every registered one, whatever was interrupted.
Dynamo deployments are the exception: they live and die with the runner.
"""

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.api import (
    Cleanup,
    EngineSpec,
    ExperimentSpec,
    RoutingArm,
    RunPlacement,
    ServiceBalancing,
)
from kvbench.loadgen.config import RunConfig
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    Cluster,
    DynamoEndpoint,
    LoadState,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.caches import reset_prefix_caches
from kvbench.runner.cluster.kv_events import kv_event_batches
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.runner.cluster.local.arms import open_local_arm
from kvbench.runner.cluster.local.children import LocalChildren
from kvbench.runner.cluster.local.launcher import WorkerLauncher, WorkerSlot
from kvbench.runner.cluster.local.load import LocalLoads
from kvbench.runner.cluster.local.sim_workers import SimLauncher
from kvbench.runner.cluster.local.workers import LOCAL_NODE, shared_gpu_of, start_worker
from kvbench.runner.failures import LoadFailed, WorkersNotReady

if TYPE_CHECKING:
    from kvbench.dynamo import DynamoDeployment

__all__ = ["LOCAL_BALANCING", "LocalCluster"]

LOCAL_BALANCING = ServiceBalancing(
    mode="local-random",
    source="kvbench run's Service stand-in: a seeded random worker per connection",
)
"""What balances a local Service arm (`service.py`), recorded as kube-proxy's mode is."""


class LocalCluster(Cluster):
    """Workers are what `launcher` starts (default: `kvbench sim` processes); logs, run configs
    and the registry under `work_dir`."""

    def __init__(
        self,
        work_dir: Path,
        block: LoopbackBlock | None = None,
        launcher: WorkerLauncher | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.block = block or LoopbackBlock()
        self.launcher = launcher or SimLauncher()
        self._warmed = False
        self.children = LocalChildren(self.work_dir / "children")
        self.loads = LocalLoads(self.children, self.work_dir / "loadgen")
        self._dynamo: DynamoDeployment | None = None
        self._dynamo_workers: list[WorkerInfo] = []
        self._dynamo_ids: dict[str, int] = {}

    @property
    def _engine_file(self) -> Path:
        """Which launcher's workers this work directory has held (`recover` writes it)."""
        return self.work_dir / "engine"

    def problems(self, spec: ExperimentSpec) -> list[str]:
        problems = self.launcher.problems(spec)
        held = self._engine_file.read_text().strip() if self._engine_file.exists() else None
        if held is not None and held != self.launcher.engine:
            problems.append(
                f"--engine {self.launcher.engine}: {self.work_dir} has run --engine {held} "
                "workers, whose runs would mix with these; give another --out"
            )
        return problems

    def uses_simulator(self, spec: ExperimentSpec) -> bool:
        return self.launcher.simulated

    async def recover(self, keep: ChildNames | None) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._engine_file.write_text(self.launcher.engine + "\n")
        kept = {keep.load, keep.arm} if keep is not None else set()
        if keep is not None:
            kept |= {c.name for c in self.children.all("worker")}
        await self.children.stop_all(keep=kept)

    async def start_workers(
        self,
        spec: ExperimentSpec,
        variant: str,
        engine: EngineSpec,
        arm: RoutingArm,
        names: ChildNames,
    ) -> list[WorkerInfo]:
        await self._stop_workers()
        if arm.external is not None:
            return []
        if arm.dynamo is not None:
            return await self._start_dynamo(spec, engine, arm, names)
        log_dir = self.work_dir / "logs" / f"{names.prefix}-{variant}"
        log_dir.mkdir(parents=True, exist_ok=True)
        pods = [(p, i, f"{p.name}-{i}") for p in spec.workers for i in range(p.replicas)]
        slots = [
            WorkerSlot(
                pool,
                name,
                ordinal,
                names.worker_seed(spec.load.seed, name),
                shared_gpu_of(pool, index, str(log_dir)),
            )
            for ordinal, (pool, index, name) in enumerate(pods)
        ]
        alone = 1 if self.launcher.warm_first and not self._warmed else 0
        results = await self._start_each(spec, engine, slots[:alone], log_dir)
        if not any(isinstance(r, BaseException) for r in results):
            self._warmed = True
            results += await self._start_each(spec, engine, slots[alone:], log_dir)
        failures = {
            slot.name: f"{type(r).__name__}: {r}"
            for slot, r in zip(slots, results, strict=False)
            if isinstance(r, BaseException)
        }
        if failures:
            await self._stop_workers()
            cancelled = [r for r in results if isinstance(r, asyncio.CancelledError)]
            if cancelled:
                raise cancelled[0]
            raise WorkersNotReady(failures)
        return [r for r in results if isinstance(r, WorkerInfo)]

    async def _start_each(
        self, spec: ExperimentSpec, engine: EngineSpec, slots: list[WorkerSlot], log_dir: Path
    ) -> list[WorkerInfo | BaseException]:
        """Start `slots` side by side; each one's worker, or what its start raised."""
        return await asyncio.gather(
            *(
                start_worker(
                    self.launcher,
                    spec,
                    engine,
                    slot,
                    self.block,
                    self.children,
                    log_dir,
                    spec.timeouts.workers_ready_seconds,
                )
                for slot in slots
            ),
            return_exceptions=True,
        )

    async def _start_dynamo(
        self, spec: ExperimentSpec, engine: EngineSpec, arm: RoutingArm, names: ChildNames
    ) -> list[WorkerInfo]:
        from kvbench.runner.cluster.local.dynamo import start_dynamo

        assert arm.dynamo is not None
        scratch = self.work_dir / "dynamo" / f"{names.prefix}-{arm.name}"
        try:
            self._dynamo, self._dynamo_workers, self._dynamo_ids = await start_dynamo(
                spec, engine, arm.dynamo, self.block.address(), scratch
            )
        except (RuntimeError, TimeoutError) as err:
            raise WorkersNotReady({"dynamo": str(err)}) from err
        return self._dynamo_workers

    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        await reset_prefix_caches(workers)

    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        await self.close_arm()
        if arm.dynamo is not None:
            if self._dynamo is None:
                raise RuntimeError(f"arm {arm.name}: the Dynamo deployment is not running")
            return DynamoEndpoint(
                arm=arm.name, url=self._dynamo.base_url, worker_ids=dict(self._dynamo_ids)
            )
        endpoint = await open_local_arm(
            arm,
            workers,
            self.block,
            self.children,
            names,
            self.work_dir / "logs",
            spec.timeouts.workers_ready_seconds,
            f"{spec.load.seed}/{arm.name}/r{names.index}",
        )
        if arm.service is not None and isinstance(endpoint, UrlEndpoint):
            endpoint = endpoint.model_copy(update={"balancing": LOCAL_BALANCING})
        return endpoint

    async def close_arm(self) -> None:
        await asyncio.gather(*(self.children.stop(c) for c in self.children.all("arm")))

    async def start_load(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        self.loads.start(config, names)

    async def load_state(self, names: ChildNames) -> LoadState:
        return self.loads.state(names)

    async def wait_load(self, names: ChildNames, timeout: float) -> bytes:
        if self.children.get(names.load) is None and self.loads.state(names).phase == "absent":
            raise LoadFailed(f"load generator {names.load} is gone and left no result")
        return await self.loads.wait(names, timeout)

    async def release_load(self, names: ChildNames, keep: bool) -> None:
        await self.loads.release(names, keep)

    async def check_workers(self, workers: list[WorkerInfo]) -> list[str]:
        problems = []
        dynamo = {w.name for w in self._dynamo_workers}
        for worker in workers:
            if worker.name in dynamo:
                if self._dynamo is None or not all(p.running() for p in self._dynamo.processes):
                    problems.append(f"{worker.name}: the Dynamo deployment stopped")
                continue
            child = self.children.get(worker.name)
            if child is None or child.uid != worker.uid:
                problems.append(f"{worker.name}: replaced or gone since it became ready")
            elif not self.children.alive(child):
                problems.append(f"{worker.name}: exited during the run:\n{child.log_tail(10)}")
        return problems

    async def check_arm(
        self, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> dict[str, int] | None:
        if arm.router is None or arm.router.policy != "kv_aware":
            return None
        router = self.children.get(names.arm)
        if router is None:
            raise RuntimeError(f"{names.arm}: the router is gone, its KV events uncounted")
        log = await asyncio.to_thread(router.log_path.read_text, errors="replace")
        return kv_event_batches(log, workers)

    async def load_placement(self, arm: RoutingArm, names: ChildNames) -> RunPlacement:
        """This machine, as its workers' node is named: every process runs here."""
        router = LOCAL_NODE if arm.router is not None else None
        return RunPlacement(load_generator=LOCAL_NODE, router=router)

    async def worker_logs(self, worker: WorkerInfo) -> str:
        child = self.children.get(worker.name)
        if child is None:
            raise KeyError(worker.name)
        return child.log_path.read_text(errors="replace")

    async def _stop_workers(self) -> None:
        await asyncio.gather(*(self.children.stop(c) for c in self.children.all("worker")))
        if self._dynamo is not None:
            deployment, self._dynamo, self._dynamo_workers = self._dynamo, None, []
            await asyncio.to_thread(deployment.stop)

    async def detach(self) -> None:
        """Leave every registered process running; a Dynamo deployment cannot outlive its
        runner, so it is stopped."""
        if self._dynamo is not None:
            await self._stop_workers()

    async def teardown(self, cleanup: Cleanup) -> None:
        keep = {c.name for c in self.children.all("worker")} if cleanup.keep_workers else set()
        if self._dynamo is not None and not cleanup.keep_workers:
            deployment, self._dynamo, self._dynamo_workers = self._dynamo, None, []
            await asyncio.to_thread(deployment.stop)
        await self.children.stop_all(keep=keep)
