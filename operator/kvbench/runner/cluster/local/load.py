"""The load generator as the local back end runs it: `kvbench loadgen` in its own process,
exactly as the Kubernetes Job runs it, so the client never shares a core's event loop with the
runner. Like a Job it outlives the runner that started it, and its result document is a file
that a later runner collects."""

import sys
from pathlib import Path

from kvbench.loadgen.config import RunConfig
from kvbench.runner.cluster.base import ChildNames, LoadState
from kvbench.runner.cluster.local.children import LocalChildren
from kvbench.runner.failures import LoadFailed, RunTimeout

__all__ = ["LocalLoads"]


class LocalLoads:
    """Load generator processes, one per run attempt, under `work_dir`."""

    def __init__(self, children: LocalChildren, work_dir: Path) -> None:
        self.children = children
        self.work_dir = Path(work_dir)

    def _result(self, names: ChildNames) -> Path:
        return self.work_dir / f"{names.prefix}.result.json.gz"

    def start(self, config: RunConfig, names: ChildNames) -> None:
        """Start the attempt's load generator unless it exists or already left a result."""
        if self.children.get(names.load) is not None or self._result(names).exists():
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.work_dir / f"{names.prefix}.config.json"
        config_path.write_text(config.model_dump_json(indent=1))
        argv = [sys.executable, "-m", "kvbench", "loadgen", "--config", str(config_path)]
        argv += ["--out", str(self._result(names))]
        self.children.spawn(
            names.load, "load", argv, self.work_dir / f"{names.prefix}.log", owner=names.prefix
        )

    def state(self, names: ChildNames) -> LoadState:
        child = self.children.get(names.load)
        if child is not None and self.children.alive(child):
            return LoadState(phase="running")
        result = self._result(names)
        if result.exists():
            return LoadState(phase="succeeded", document=result.read_bytes())
        if child is None:
            return LoadState(phase="absent")
        code = self.children.exit_code(child)
        exit_text = (
            "unknown exit status (started by an earlier runner)"
            if code is None
            else (f"exit {code}")
        )
        return LoadState(
            phase="failed",
            reason=f"load generator {names.load} ended without a result ({exit_text}):\n"
            f"{child.log_tail()}",
        )

    async def wait(self, names: ChildNames, timeout: float) -> bytes:
        child = self.children.get(names.load)
        if child is not None and not await self.children.wait_exit(child, timeout):
            await self.children.stop(child)  # SIGTERM: it writes what it has, marked partial
            if self._result(names).exists():
                return self._result(names).read_bytes()
            raise RunTimeout(
                f"load generator {names.load} still running after {timeout:.0f} s "
                "(timeouts.run): stopped"
            )
        state = self.state(names)
        if state.phase == "succeeded":
            assert state.document is not None
            return state.document
        if state.phase == "absent":
            raise LoadFailed(f"load generator {names.load} is gone and left no result")
        raise LoadFailed(state.reason or f"load generator {names.load} failed")

    async def release(self, names: ChildNames, keep: bool) -> None:
        """Unregister the attempt's process (it has ended); its files stay when `keep`."""
        child = self.children.get(names.load)
        if child is not None:
            await self.children.stop(child)
        if not keep:
            for suffix in (".config.json", ".result.json.gz"):
                (self.work_dir / f"{names.prefix}{suffix}").unlink(missing_ok=True)
