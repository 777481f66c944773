"""The real control plane of a test cluster: etcd, apiserver, controller manager, scheduler.

In one working directory, with ports the kernel hands out: the apiserver on the host's address
on the node network (pods reach it through the `kubernetes` Service), the rest on 127.0.0.1.
The apiserver authenticates bearer tokens from a file and authorizes with the Node authorizer
and RBAC; the controller manager, the scheduler, every kubelet and kube-proxy run as their own
users, as on a real cluster.
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml
from pydantic import BaseModel

from kvbench.procs import ManagedProcess, free_port
from kvbench.testing.build import Binaries
from kvbench.testing.longwaits import Say, say_on_stderr
from kvbench.testing.node.network import NetworkPlan
from kvbench.testing.pki import ClusterPKI

__all__ = ["ApiAccess", "ControlPlane", "write_kubeconfig"]

_HOST = "127.0.0.1"
_START_TIMEOUT = 120.0


class ApiAccess(BaseModel):
    """How a client reaches the apiserver: URL, CA bundle and a bearer token."""

    server: str
    ca_cert: Path
    token: str

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def write_kubeconfig(path: Path, access: ApiAccess, user: str = "admin") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kvbench-test",
                "cluster": {"server": access.server, "certificate-authority": str(access.ca_cert)},
            }
        ],
        "users": [{"name": user, "user": {"token": access.token}}],
        "contexts": [
            {"name": "kvbench-test", "context": {"cluster": "kvbench-test", "user": user}}
        ],
        "current-context": "kvbench-test",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def _groups(user: str) -> str:
    """The token file's groups column for `user` (and the line's end)."""
    if user == "admin":
        return ',"system:masters"\n'
    if user.startswith("system:node:"):
        return ',"system:nodes"\n'
    return "\n"


def _https_ok(url: str, verify: ssl.SSLContext | bool, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, verify=verify, headers=headers, timeout=2.0).status_code == 200


class ControlPlane:
    """Starts and stops the four control-plane processes of one cluster."""

    def __init__(
        self,
        binaries: Binaries,
        workdir: Path,
        network: NetworkPlan,
        node_names: list[str],
        pki: ClusterPKI,
        say: Say = say_on_stderr,
    ):
        self.network = network
        self.host = network.host_ip
        self.binaries = binaries
        self.say = say
        self.workdir = workdir
        self.pki = pki
        self.processes: list[ManagedProcess] = []
        self._ready: dict[str, tuple[Callable[[], bool], str]] = {}
        """How each component shows it is up, so a restart waits as the first start did."""
        self.api_port = free_port(self.host)
        users = ["admin", "system:kube-controller-manager", "system:kube-scheduler",
                 "system:kube-proxy", *(f"system:node:{n}" for n in node_names)]  # fmt: skip
        tokens = {user: secrets.token_hex(16) for user in users}
        self._tokens = tokens
        self.admin = ApiAccess(
            server=f"https://{self.host}:{self.api_port}",
            ca_cert=pki.ca_cert,
            token=tokens["admin"],
        )
        self.kubeconfig = workdir / "kubeconfig"

    def _access(self, user: str) -> ApiAccess:
        return self.admin.model_copy(update={"token": self._tokens[user]})

    def kubeconfig_for(self, user: str, path: Path) -> Path:
        """A kubeconfig of `user` (a node's kubelet, kube-proxy)."""
        return write_kubeconfig(path, self._access(user), user)

    def _spawn(
        self, name: str, argv: list[str], ready: Callable[[], bool], what: str
    ) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.workdir / "logs" / f"{name}.log")
        self.processes.append(process)
        self._ready[name] = (ready, what)
        process.start()
        self.say(f"started {name}: waiting for {what} (up to {_START_TIMEOUT:.0f}s)")
        process.wait_until(ready, _START_TIMEOUT, what)
        return process

    def restart(self) -> None:
        """Stop every component, then start each again on the same ports and data (etcd keeps
        its data directory): what a control-plane upgrade or a host reboot does to clients."""
        for process in reversed(self.processes):
            process.stop()
        for process in self.processes:
            process.start()
            ready, what = self._ready[process.name]
            self.say(f"restarted {process.name}: waiting for {what} (up to {_START_TIMEOUT:.0f}s)")
            process.wait_until(ready, _START_TIMEOUT, what)

    def start(self) -> None:
        """Start etcd, then the apiserver, then the controllers; return once all are healthy."""
        etcd = self._start_etcd()
        self._start_apiserver(etcd)
        write_kubeconfig(self.kubeconfig, self.admin)
        self._start_controller_manager()
        self._start_scheduler()

    def _start_etcd(self) -> str:
        client, peer = free_port(_HOST), free_port(_HOST)
        client_url, peer_url = f"http://{_HOST}:{client}", f"http://{_HOST}:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=kvbench",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kvbench={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            lambda: httpx.get(f"{client_url}/health", timeout=2.0).json()["health"] == "true",
            "healthy etcd",
        )
        return client_url

    def _start_apiserver(self, etcd_url: str) -> None:
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            "".join(
                f"{token},{user},{user}" + _groups(user) for user, token in self._tokens.items()
            )
        )
        tokens.chmod(0o600)
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.host}",
                f"--advertise-address={self.host}",
                f"--secure-port={self.api_port}",
                "--insecure-port=0",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={self.pki.apiserver_cert}",
                f"--tls-private-key-file={self.pki.apiserver_key}",
                f"--client-ca-file={self.pki.ca_cert}",
                f"--token-auth-file={tokens}",
                *self._node_flags(),
                f"--service-account-key-file={self.pki.service_account_pub}",
                f"--service-account-signing-key-file={self.pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
            ],
            lambda: _https_ok(
                f"{self.admin.server}/readyz", self.admin.ssl_context(), self.admin.token
            ),
            "ready apiserver (/readyz)",
        )

    def _node_flags(self) -> list[str]:
        """The kubelets': the Node authorizer for them, the apiserver's client certificate
        towards them."""
        return [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={self.network.service_cidr}",
            f"--kubelet-client-certificate={self.pki.kubelet_client_cert}",
            f"--kubelet-client-key={self.pki.kubelet_client_key}",
            f"--kubelet-certificate-authority={self.pki.ca_cert}",
        ]

    def _controller_kubeconfig(self, user: str) -> Path:
        return write_kubeconfig(
            self.workdir / f"{user.split(':')[-1]}.kubeconfig", self._access(user), user
        )

    def _start_controller_manager(self) -> None:
        self._start_controller(
            "kube-controller-manager",
            self.binaries.kube_controller_manager,
            "system:kube-controller-manager",
            "controller-manager-certs",
            [
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--cluster-signing-cert-file={self.pki.ca_cert}",
                f"--cluster-signing-key-file={self.pki.ca_key}",
                "--controllers=*",
            ],
        )

    def _start_scheduler(self) -> None:
        self._start_controller(
            "kube-scheduler",
            self.binaries.kube_scheduler,
            "system:kube-scheduler",
            "scheduler-certs",
            [],
        )

    def _start_controller(
        self, name: str, binary: Path, user: str, cert_dir: str, extra: list[str]
    ) -> None:
        """Start a component that talks to the apiserver as `user`; wait until it is healthy."""
        kubeconfig = self._controller_kubeconfig(user)
        port = free_port(_HOST)
        self._spawn(
            name,
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--bind-address={_HOST}",
                f"--secure-port={port}",
                "--port=0",
                f"--cert-dir={self.workdir / cert_dir}",
                "--leader-elect=false",
                "--profiling=false",
                *extra,
            ],
            lambda: _https_ok(f"https://{_HOST}:{port}/healthz", False),
            f"healthy {name}",
        )

    def failures(self) -> list[str]:
        """Descriptions (with log tails) of processes that have died."""
        return [p.describe_failure() for p in self.processes if not p.running()]

    def stop(self) -> None:
        """Stop in reverse order of start, by PID."""
        for process in reversed(self.processes):
            process.stop()
