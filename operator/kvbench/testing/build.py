"""Find the test cluster's binaries, building them first when they are missing.

The build (Debian's kubernetes 1.20.2 source, a few minutes on 2 cores) lives in
`build_kubernetes.sh` beside this module; its output is cached outside the repo, keyed by
version and the script's hash (it patches the kubelet), so only the first run on a machine
pays for it. Run `python -m kvbench.testing.build` to build ahead of the tests (CI does). The
build's output goes to `build.log` in the cache; its steps, and every 30 s its last line, are
said, and so is a wait for another process's build (`kvbench.testing.longwaits`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from pydantic import BaseModel

from kvbench.procs import tail
from kvbench.testing.longwaits import Say, exclusive, run_logged, say_on_stderr

__all__ = ["KUBERNETES_VERSION", "Binaries", "bin_dir", "ensure_binaries", "find_binaries"]

KUBERNETES_VERSION = "1.20.2"
_SCRIPT = Path(__file__).with_name("build_kubernetes.sh")
_STEPS = "build-test-cluster: "
"""The prefix of the script's progress lines."""


class Binaries(BaseModel):
    """Absolute paths of every program the control plane and the nodes run, and of the pod
    sandbox's `pause` (a static binary the nodes' pause image is made of)."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kubelet: Path
    kube_proxy: Path
    pause: Path
    etcd: Path


def _cache_root() -> Path:
    return Path(os.environ.get("KVBENCH_K8S_CACHE", "/var/cache/kvbench"))


def bin_dir() -> Path:
    build = hashlib.sha256(_SCRIPT.read_bytes()).hexdigest()[:12]
    return _cache_root() / f"kubernetes-{KUBERNETES_VERSION}-{build}" / "bin"


def find_binaries() -> Binaries | None:
    """The cached binaries and etcd, or None if any is missing."""
    directory = bin_dir()
    etcd = shutil.which("etcd")
    paths = {
        name: directory / name
        for name in (
            "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
            "kubelet", "kube-proxy", "pause",
        )
    }  # fmt: skip
    if etcd is None or not all(os.access(p, os.X_OK) for p in paths.values()):
        return None
    return Binaries(
        kube_apiserver=paths["kube-apiserver"],
        kube_controller_manager=paths["kube-controller-manager"],
        kube_scheduler=paths["kube-scheduler"],
        kubectl=paths["kubectl"],
        kubelet=paths["kubelet"],
        kube_proxy=paths["kube-proxy"],
        pause=paths["pause"],
        etcd=Path(etcd),
    )


def ensure_binaries(say: Say = say_on_stderr) -> Binaries:
    """The binaries, built (once per machine, under a lock) if they are missing. A wait for
    another process's build and the build itself say how far they are (`say`)."""
    found = find_binaries()
    if found is not None:
        return found
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    with exclusive(root / ".build.lock", "Kubernetes build", say, progress=log):
        found = find_binaries()
        if found is not None:
            return found
        env = {**os.environ, "KVBENCH_K8S_CACHE": str(root), "KVBENCH_K8S_BIN_DIR": str(bin_dir())}
        code = run_logged(
            ["bash", str(_SCRIPT)],
            env,
            log,
            f"building Kubernetes {KUBERNETES_VERSION} (a few minutes, once per machine)",
            steps=_STEPS,
            say=say,
        )
        if code != 0:
            raise RuntimeError(f"{_SCRIPT} failed with exit code {code}:\n{tail(log, 30)}")
    found = find_binaries()
    if found is None:
        raise RuntimeError(f"{_SCRIPT} succeeded but binaries are missing from {bin_dir()}")
    return found


if __name__ == "__main__":
    print(ensure_binaries().kube_apiserver.parent)
