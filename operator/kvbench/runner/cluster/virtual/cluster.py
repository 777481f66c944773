"""The virtual back end: the experiment's workers and its load in one discrete-event
simulation (`kvbench.virtual`), with no process, socket or wall clock.

The runner drives it as it drives the local and Kubernetes back ends, so planning, freshness,
retries, records and reports are the same code; what differs is only that a worker is an
engine in memory built from the command line a local `kvbench sim` worker would get, an arm
is a routing decision inside the simulation, and a load generator is a function call whose
result document is written where the local back end writes its load generator's.
"""

import asyncio
import hashlib
from pathlib import Path

from kvbench import __version__
from kvbench.api import (
    BenchmarkExperiment,
    Cleanup,
    EngineSpec,
    ExperimentSpec,
    RoutingArm,
    RunPlacement,
    ServiceBalancing,
)
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.workload.mooncake import TraceError
from kvbench.loadgen.workload.trace_source import replayed_trace
from kvbench.runner.cluster.base import (
    ArmEndpoint,
    ChildNames,
    Cluster,
    LoadState,
    PodsEndpoint,
    UrlEndpoint,
    WorkerInfo,
)
from kvbench.runner.cluster.local.workers import shared_gpu_of, sim_command
from kvbench.runner.cluster.virtual.preflight import virtual_problems
from kvbench.runner.failures import LoadFailed, WorkersNotReady
from kvbench.sim.gpu_share import InProcessGpu
from kvbench.sim.timing import TimingProfile
from kvbench.virtual.load import run_virtual_load
from kvbench.virtual.workers import VirtualWorker

__all__ = ["VIRTUAL_BALANCING", "VIRTUAL_NODE", "VirtualCluster", "in_virtual_time"]

VIRTUAL_NODE = "virtual"
"""The node every virtual worker and load generator is recorded on."""

VIRTUAL_BALANCING = ServiceBalancing(
    mode="local-random",
    source="virtual time: kvbench run's Service stand-in modelled, a seeded random worker per "
    "new connection (the same choices as the stand-in's for the same seed and send order)",
)


def in_virtual_time(experiment: BenchmarkExperiment) -> BenchmarkExperiment:
    """`experiment` with `simulator.mode: virtual`: what its results directory keeps, so its
    report says its clock, and a resume without `--virtual` is refused as another experiment
    rather than mixing HTTP runs into it."""
    spec = experiment.spec
    if spec.simulator.mode == "virtual":
        return experiment
    simulator = spec.simulator.model_copy(update={"mode": "virtual"})
    return experiment.model_copy(update={"spec": spec.model_copy(update={"simulator": simulator})})


class VirtualCluster(Cluster):
    """Virtual workers and loads; result documents under `work_dir/loadgen`. `profile`
    replaces every pool's timing profile (a fitted one: `kvbench predict`)."""

    def __init__(self, work_dir: Path, profile: TimingProfile | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.profile = profile
        self._workers: dict[str, VirtualWorker] = {}
        self._service_seed: str | None = None
        self._failed: dict[str, str] = {}

    def _result(self, names: ChildNames) -> Path:
        return self.work_dir / "loadgen" / f"{names.prefix}.result.json.gz"

    def problems(self, spec: ExperimentSpec) -> list[str]:
        return virtual_problems(spec)

    def uses_simulator(self, spec: ExperimentSpec) -> bool:
        return True

    async def recover(self, keep: ChildNames | None) -> None:
        """Nothing outlives a virtual run but its result documents, which stay to be read."""
        (self.work_dir / "loadgen").mkdir(parents=True, exist_ok=True)

    async def start_workers(
        self,
        spec: ExperimentSpec,
        variant: str,
        engine: EngineSpec,
        arm: RoutingArm,
        names: ChildNames,
    ) -> list[WorkerInfo]:
        self._workers = {}
        infos, failures = [], {}
        gpus: dict[str, InProcessGpu] = {}
        for pool in spec.workers:
            for i in range(pool.replicas):
                name = f"{pool.name}-{i}"
                seed = names.worker_seed(spec.load.seed, name)
                shared = shared_gpu_of(pool, i, VIRTUAL_NODE)
                argv = sim_command(spec, engine, pool, name, VIRTUAL_NODE, 0, seed, shared)
                try:
                    worker = VirtualWorker(name, argv[argv.index("serve") :], self.profile, gpus)
                except (ValueError, SystemExit) as err:
                    failures[name] = f"{type(err).__name__}: {err}"
                    continue
                self._workers[name] = worker
                uid = hashlib.sha256(f"{names.prefix}/{name}/{seed}".encode()).hexdigest()[:32]
                infos.append(
                    WorkerInfo(
                        name=name,
                        pool=pool.name,
                        uid=f"virtual-{uid}",
                        node=VIRTUAL_NODE,
                        image=f"kvbench sim {__version__} (virtual time)",
                        base_url=f"http://{name}.virtual",
                        metrics_url=f"http://{name}.virtual/metrics",
                        kv_cache_tokens=worker.kv_cache_tokens,
                        startup_seconds=0.0,
                    )
                )
        if failures:
            self._workers = {}
            raise WorkersNotReady(failures)
        return infos

    async def reset_caches(self, workers: list[WorkerInfo]) -> None:
        for info in workers:
            if not self._workers[info.name].engine.core.reset_prefix_cache():
                raise RuntimeError(f"{info.name}: prefix cache not reset: blocks still in use")

    async def open_arm(
        self, spec: ExperimentSpec, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> ArmEndpoint:
        if arm.service is not None:
            self._service_seed = f"{spec.load.seed}/{arm.name}/r{names.index}"
            return UrlEndpoint(
                arm=arm.name, url=f"http://{arm.name}.virtual", balancing=VIRTUAL_BALANCING
            )
        if arm.affinity:
            self._service_seed = None
            return PodsEndpoint(arm=arm.name, pods={w.name: w.base_url for w in workers})
        raise RuntimeError(f"arm {arm.name}: not modelled in virtual time")

    async def close_arm(self) -> None:
        self._service_seed = None

    async def start_load(self, spec: ExperimentSpec, config: RunConfig, names: ChildNames) -> None:
        """Run the whole load now (in a thread: the runner's loop stays free); a failure is
        kept as the attempt's outcome, like a load generator that exited."""
        result = self._result(names)
        if result.exists():
            return
        try:
            trace = None
            if config.workload.trace is not None and config.trace is not None:
                trace = replayed_trace(config.workload.trace, config.trace)
            document = await asyncio.to_thread(
                run_virtual_load, config, self._workers, self._service_seed, trace
            )
        except (TraceError, ValueError) as err:
            self._failed[names.prefix] = f"{type(err).__name__}: {err}"
            return
        result.parent.mkdir(parents=True, exist_ok=True)
        document.save(result)

    async def load_state(self, names: ChildNames) -> LoadState:
        if self._result(names).exists():
            return LoadState(phase="succeeded", document=self._result(names).read_bytes())
        if names.prefix in self._failed:
            return LoadState(phase="failed", reason=self._failed[names.prefix])
        return LoadState(phase="absent")

    async def wait_load(self, names: ChildNames, timeout: float) -> bytes:
        state = await self.load_state(names)
        if state.phase == "succeeded":
            assert state.document is not None
            return state.document
        raise LoadFailed(state.reason or f"virtual load {names.load} left no result")

    async def release_load(self, names: ChildNames, keep: bool) -> None:
        self._failed.pop(names.prefix, None)
        if not keep:
            self._result(names).unlink(missing_ok=True)

    async def check_workers(self, workers: list[WorkerInfo]) -> list[str]:
        return [f"{w.name}: gone" for w in workers if w.name not in self._workers]

    async def check_arm(
        self, arm: RoutingArm, workers: list[WorkerInfo], names: ChildNames
    ) -> dict[str, int] | None:
        return None

    async def load_placement(self, arm: RoutingArm, names: ChildNames) -> RunPlacement:
        return RunPlacement(load_generator=VIRTUAL_NODE, router=None)

    async def worker_logs(self, worker: WorkerInfo) -> str:
        virtual = self._workers.get(worker.name)
        if virtual is None:
            raise KeyError(worker.name)
        ignored = ", ".join(virtual.ignored_flags) or "none"
        return f"virtual worker {worker.name}: no process, no log (flags not modelled: {ignored})"

    async def detach(self) -> None:
        self._workers = {}

    async def teardown(self, cleanup: Cleanup) -> None:
        self._workers = {}
