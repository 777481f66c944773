"""Find the test cluster's binaries, building them first when they are missing.

The build (Debian's kubernetes 1.20.2 source, a few minutes on 2 cores) lives in
`build_kubernetes.sh` beside this module; its output is cached outside the repo,
keyed by version, so only the first run on a machine pays for it. Run
`python -m kvbench.testing.build` to build ahead of the tests (CI does).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

__all__ = ["KUBERNETES_VERSION", "Binaries", "bin_dir", "ensure_binaries", "find_binaries"]

KUBERNETES_VERSION = "1.20.2"
_SCRIPT = Path(__file__).with_name("build_kubernetes.sh")


class Binaries(BaseModel):
    """Absolute paths of every program the control plane runs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path


def _cache_root() -> Path:
    return Path(os.environ.get("KVBENCH_K8S_CACHE", "/var/cache/kvbench"))


def bin_dir() -> Path:
    return _cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / "bin"


def find_binaries() -> Binaries | None:
    """The cached binaries and etcd, or None if any is missing."""
    directory = bin_dir()
    etcd = shutil.which("etcd")
    paths = {
        name: directory / name
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    }
    if etcd is None or not all(os.access(p, os.X_OK) for p in paths.values()):
        return None
    return Binaries(
        kube_apiserver=paths["kube-apiserver"],
        kube_controller_manager=paths["kube-controller-manager"],
        kube_scheduler=paths["kube-scheduler"],
        kubectl=paths["kubectl"],
        etcd=Path(etcd),
    )


def ensure_binaries() -> Binaries:
    """The binaries, built (once per machine, under a lock) if they are missing."""
    found = find_binaries()
    if found is not None:
        return found
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build finishes first
        found = find_binaries()
        if found is not None:
            return found
        env = {**os.environ, "KVBENCH_K8S_CACHE": str(root)}
        result = subprocess.run(["bash", str(_SCRIPT)], env=env, stdout=sys.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"{_SCRIPT} failed with exit code {result.returncode}")
    found = find_binaries()
    if found is None:
        raise RuntimeError(f"{_SCRIPT} succeeded but binaries are missing from {bin_dir()}")
    return found


if __name__ == "__main__":
    print(ensure_binaries().kube_apiserver.parent)
