"""The simulator's launcher: `kvbench sim` workers on the experiment's time scale, the local
back end's default."""

import httpx

from kvbench import __version__
from kvbench.api import EngineSpec, ExperimentSpec
from kvbench.runner.cluster.local.launcher import WorkerLauncher, WorkerProcess, WorkerSlot
from kvbench.runner.cluster.local.preflight import local_problems
from kvbench.runner.cluster.local.workers import engine_env, sim_command

__all__ = ["SimLauncher"]


class SimLauncher(WorkerLauncher):
    """`kvbench sim` workers with the simulator-only flags (`sim_command`)."""

    engine = "sim"
    simulated = True

    def problems(self, spec: ExperimentSpec) -> list[str]:
        return local_problems(spec)

    def process(
        self, spec: ExperimentSpec, engine: EngineSpec, slot: WorkerSlot, host: str, port: int
    ) -> WorkerProcess:
        argv = sim_command(
            spec, engine, slot.pool, slot.name, host, port, slot.seed, slot.shared_gpu
        )
        return WorkerProcess(argv=argv, env=engine_env(engine))

    async def image(self, client: httpx.AsyncClient, base_url: str) -> str:
        return f"kvbench sim {__version__}"
