"""A node's container runtime: a containerd of its own (Debian's 1.6, its CRI plugin) with
its own socket, root and state directories, in the node's network namespace, running runc.

Two kubelets cannot share one runtime (each removes the other's pods as unknown), so every
node has one. This machine refuses negative OOM scores (no CAP_SYS_RESOURCE), and the kubelet
asks for -998 on every pod sandbox, which runc then fails to set ("can't get final child's
PID from pipe"): `restrict_oom_score_adj`, containerd's own setting for runtimes without that
capability, raises any score below containerd's own (0) to it. Nothing else is changed.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from kvbench.procs import ManagedProcess

__all__ = ["CNI_BIN_DIR", "NodeContainerd"]

CNI_BIN_DIR = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins."""
_NAMESPACE = "k8s.io"
_START_TIMEOUT = 60.0


class NodeContainerd:
    """Its config, its process (`process`, started by the node) and its images."""

    def __init__(
        self, name: str, root: Path, state: Path, cni_conf_dir: Path, sandbox_image: str
    ) -> None:
        self.name = name
        self.root, self.state, self.cni_conf_dir = root, state, cni_conf_dir
        self.sandbox_image = sandbox_image

    @property
    def socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def write_config(self, path: Path) -> Path:
        """containerd's config (version 2): CRI with the node's CNI and the built pause."""
        runc = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc'
        path.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{self.root}"',
                    f'state = "{self.state}"',
                    "oom_score = 0",
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    "[ttrpc]",
                    f'  address = "{self.state}/containerd.sock.ttrpc"',
                    "[debug]",
                    f'  address = "{self.state}/debug.sock"',
                    '[plugins."io.containerd.grpc.v1.cri"]',
                    f'  sandbox_image = "{self.sandbox_image}"',
                    "  restrict_oom_score_adj = true",
                    "  enable_selinux = false",
                    "  disable_apparmor = true",
                    '[plugins."io.containerd.grpc.v1.cri".containerd]',
                    '  snapshotter = "overlayfs"',
                    '  default_runtime_name = "runc"',
                    f"{runc}]",
                    '  runtime_type = "io.containerd.runc.v2"',
                    f"{runc}.options]",
                    "  SystemdCgroup = false",
                    '[plugins."io.containerd.grpc.v1.cri".cni]',
                    f'  bin_dir = "{CNI_BIN_DIR}"',
                    f'  conf_dir = "{self.cni_conf_dir}"',
                    "",
                ]
            )
        )
        return path

    def process(self, prefix: list[str], config: Path, log: Path) -> ManagedProcess:
        binary = shutil.which("containerd")
        if binary is None:
            raise RuntimeError("containerd is not installed (Debian: apt-get install containerd)")
        return ManagedProcess(
            f"{self.name}/containerd", [*prefix, binary, "--config", str(config)], log
        )

    def wait_ready(self, process: ManagedProcess) -> None:
        process.wait_until(self._answers, _START_TIMEOUT, f"{self.name}'s containerd")

    def _answers(self) -> bool:
        return self.ctr("version", check=False).returncode == 0

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        argv = ["ctr", "--address", str(self.socket), "--namespace", _NAMESPACE, *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done

    def image_names(self) -> set[str]:
        listed = self.ctr("images", "list", "--quiet").stdout
        return set(listed.split())

    @property
    def _marker(self) -> Path:
        return self.root / "kvbench-loaded"

    def loaded(self) -> str | None:
        """The name of the archive last loaded in full into this root."""
        return self._marker.read_text() if self._marker.exists() else None

    def forget(self, references: set[str]) -> None:
        """Remove the names of images loaded for an earlier cluster (their content is then
        collected); the CRI plugin's own `sha256:` references are its to keep."""
        if references:
            self.ctr("images", "remove", *sorted(references), check=False)

    def load(self, archive: Path) -> float:
        """Import a `docker save` archive, unpacked for the overlay snapshotter (what `kind load
        docker-image` does); the seconds it took."""
        began = time.monotonic()
        self._marker.unlink(missing_ok=True)
        self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive))
        self._marker.write_text(archive.name)
        return time.monotonic() - began
