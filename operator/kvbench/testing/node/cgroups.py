"""A node's cgroup: every process of the node (containerd and its shims, the kubelet,
kube-proxy, and the pods the kubelet puts under it with `--cgroup-root`) lives below one
cgroup, so a node stops, or goes away, by killing what that cgroup holds.

cgroup v1 (one hierarchy per controller, as on this machine) and v2 (one unified tree).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = ["NodeCgroup"]

_ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
                   "systemd")  # fmt: skip


def _unified() -> bool:
    return (_ROOT / "cgroup.controllers").exists()


class NodeCgroup:
    """`/<name>` in every hierarchy, with `/<name>/system` for the node's own daemons."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _dirs(self, sub: str = "") -> list[Path]:
        relative = f"{self.name}/{sub}".rstrip("/")
        if _unified():
            return [_ROOT / relative]
        return [_ROOT / c / relative for c in _V1_CONTROLLERS if (_ROOT / c).is_dir()]

    def create(self) -> None:
        for sub in ("", "system"):
            for directory in self._dirs(sub):
                directory.mkdir(exist_ok=True)
                if directory.relative_to(_ROOT).parts[0] == "cpuset":
                    self._inherit_cpuset(directory)
        if _unified():
            controllers = (_ROOT / "cgroup.controllers").read_text().split()
            with contextlib.suppress(OSError):
                (_ROOT / self.name / "cgroup.subtree_control").write_text(
                    " ".join(f"+{c}" for c in controllers)
                )

    @staticmethod
    def _inherit_cpuset(directory: Path) -> None:
        """A new v1 cpuset has no CPUs and no memory nodes: nothing could join it."""
        for name in ("cpuset.cpus", "cpuset.mems"):
            own = directory / name
            if own.exists() and not own.read_text().strip():
                own.write_text((directory.parent / name).read_text())

    @property
    def path(self) -> str:
        """The cgroup as the kubelet's `--cgroup-root` names it."""
        return f"/{self.name}"

    def join_command(self) -> list[str]:
        """A prefix that moves the program into `system` before it runs (its children, shims
        and all, stay there)."""
        files = " ".join(str(d / "cgroup.procs") for d in self._dirs("system"))
        script = f'for f in {files}; do echo $$ > "$f"; done; exec "$@"'
        return ["sh", "-c", script, "join-cgroup"]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for top in self._dirs():
            if not top.exists():
                continue
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    found |= {int(p) for p in procs.read_text().split()}
        return found

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL everything in the cgroup until it is empty."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def remove(self) -> None:
        """Kill what is left, then remove the cgroups, deepest first."""
        self.kill()
        for top in self._dirs():
            if not top.exists():
                continue
            for directory in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
