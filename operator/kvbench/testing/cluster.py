"""A whole test cluster: the control plane and real nodes (`kvbench.testing.node`: a kubelet,
containerd and kube-proxy each, a CNI network, a cluster DNS), started together.

    with TestCluster() as cluster:
        core = kubernetes.client.CoreV1Api(cluster.api_client())
        ...

Everything runs on the addresses of the slot the cluster claimed, in a temporary directory,
and stops (by PID) when the cluster stops, also when starting it failed; the error then
carries the logs of whatever failed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import kubernetes

from kvbench.procs import ManagedProcess, tail
from kvbench.testing.build import Binaries, ensure_binaries
from kvbench.testing.config import DEFAULT_NODES, NodeSpec
from kvbench.testing.controlplane import ApiAccess, ControlPlane
from kvbench.testing.longwaits import Say, say_on_stderr
from kvbench.testing.node.fleet import KUBELET_ROOT, RUNTIME_ROOT, NodeFleet
from kvbench.testing.node.network import NetworkPlan
from kvbench.testing.node.node import NodeFiles
from kvbench.testing.pki import make_pki
from kvbench.testing.slots import SlotLock, claim_slot

__all__ = ["TestCluster"]

_TOKEN_TIMEOUT = 30.0


_WORK_ROOT = Path(os.environ.get("KVBENCH_TESTCLUSTER_ROOT", "/var/lib/kvbench/testclusters"))


class TestCluster:
    """Start with `start()` (or `with`), stop with `stop()`; see `kubeconfig` and `access`."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        keep_workdir: bool = False,
        say: Say = say_on_stderr,
    ):
        self.node_specs = list(nodes)
        self.fleet: NodeFleet | None = None
        self.keep_workdir = keep_workdir
        self.say = say
        """Where the start's long waits say what they wait for (`kvbench.testing.longwaits`)."""
        # Not under /tmp: pods commonly mount an emptyDir at /tmp, which would hide the
        # cluster's own files from their later mounts (/etc/hosts, the token).
        _WORK_ROOT.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(tempfile.mkdtemp(prefix="kvbench-testcluster-", dir=_WORK_ROOT))
        self.binaries: Binaries | None = None
        self.control_plane: ControlPlane | None = None
        self._slot: SlotLock | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def access(self) -> ApiAccess:
        if self.control_plane is None:
            raise RuntimeError("cluster not started")
        return self.control_plane.admin

    def start(self) -> TestCluster:
        try:
            self._start()
        except BaseException as err:
            report = self.diagnostics()
            self.stop()
            raise RuntimeError(f"test cluster failed to start: {err}\n{report}") from err
        return self

    def _start(self) -> None:
        """The host bridge, the control plane on its address, then the nodes."""
        began = time.monotonic()
        self._slot = claim_slot()
        self.binaries = binaries = ensure_binaries(self.say)
        plan = NetworkPlan(slot=self._slot.slot)
        names = [spec.name for spec in self.node_specs]
        self.fleet = NodeFleet(plan, self.node_specs, binaries, self.workdir, self.say)
        self.fleet.network_up()
        pki = make_pki(
            self.workdir / "pki",
            ["127.0.0.1", plan.host_ip, plan.kubernetes_service_ip],
            [plan.node_ip(i) for i in range(len(names))],
        )
        self.control_plane = plane = ControlPlane(
            binaries, self.workdir, plan, names, pki, self.say
        )
        plane.start()
        files = {}
        for name in names:
            work = self.workdir / "nodes" / name
            work.mkdir(parents=True, exist_ok=True)
            files[name] = NodeFiles(
                workdir=work,
                kubelet_root=KUBELET_ROOT / f"{plan.slot}-{name}",
                runtime_root=RUNTIME_ROOT / f"{plan.slot}-{name}",
                kubelet_kubeconfig=plane.kubeconfig_for(
                    f"system:node:{name}", work / "kubelet.kubeconfig"
                ),
                proxy_kubeconfig=plane.kubeconfig_for(
                    "system:kube-proxy", work / "proxy.kubeconfig"
                ),
                ca_cert=pki.ca_cert,
                serving_cert=pki.kubelet_cert,
                serving_key=pki.kubelet_key,
            )
        self.fleet.start(files, self.kubeconfig, self.api_client())
        self.say(f"node start: {', '.join(f'{k} {v:.0f}s' for k, v in self.fleet.timings.items())}")
        self.say(f"waiting for the default service account's token (up to {_TOKEN_TIMEOUT:.0f}s)")
        self.ensure_namespace("default")
        self.say(f"up in {time.monotonic() - began:.0f}s: slot {plan.slot}, {self.workdir}")

    def restart_control_plane(self) -> None:
        """Stop etcd, the apiserver and the controllers, and start them again (same ports, same
        data); nodes and pods keep running, as on a real cluster."""
        assert self.control_plane is not None, "cluster not started"
        self.control_plane.restart()

    def ensure_namespace(self, name: str, timeout: float = _TOKEN_TIMEOUT) -> None:
        """Create `name` if needed and wait for its default service account's token,
        without which the apiserver refuses pods."""
        access = self.access
        with httpx.Client(
            base_url=access.server, verify=access.ssl_context(), headers=access.headers()
        ) as client:
            created = client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
            if created.status_code not in (201, 409):
                raise RuntimeError(f"creating namespace {name}: {created.text}")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                account = client.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
                if account.status_code == 200 and account.json().get("secrets"):
                    return
                time.sleep(0.2)
        raise TimeoutError(f"namespace {name}: no default service account token in {timeout}s")

    def api_client(self) -> kubernetes.client.ApiClient:
        """A `kubernetes` client configured with the admin kubeconfig."""
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return kubernetes.client.ApiClient(configuration)

    def kubectl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run the cluster's own kubectl (1.20.2) against it."""
        assert self.binaries is not None
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def kubectl_popen(self, *args: str) -> subprocess.Popen[str]:
        """Start the cluster's kubectl with piped output, for commands that stream (`logs -f`)."""
        assert self.binaries is not None
        return subprocess.Popen(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def processes(self) -> list[ManagedProcess]:
        planes = self.control_plane.processes if self.control_plane else []
        nodes = self.fleet.processes() if self.fleet else []
        return [*planes, *nodes]

    def diagnostics(self, lines: int = 40) -> str:
        """The tail of every harness process's log, the dead ones flagged."""
        parts = []
        for process in self.processes():
            if process.running():
                parts.append(f"--- {process.name} (running) ---\n{tail(process.log_path, lines)}")
            else:
                parts.append(process.describe_failure())
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the nodes first (their pods with them), then the control plane."""
        if self.fleet is not None:
            self.fleet.stop()
        if self.control_plane is not None:
            self.control_plane.stop()
        if self._slot is not None:
            self._slot.release()
            self._slot = None
        if not self.keep_workdir:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.workdir)

    def __enter__(self) -> TestCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
