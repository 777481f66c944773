"""Keys and certificates for one test cluster, made with the `openssl` command.

One CA signs the apiserver's serving certificate (so clients, in-cluster ones
included, verify it through the service-account `ca.crt`) and the node agent's
kubelet-API certificate; a separate key signs service-account tokens.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

__all__ = ["ClusterPKI", "make_pki"]


class ClusterPKI(BaseModel):
    """Paths of the files `make_pki` wrote."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    kubelet_cert: Path
    kubelet_key: Path
    kubelet_client_cert: Path
    """The apiserver's client certificate towards the kubelets (logs, exec, port-forward)."""
    kubelet_client_key: Path
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args))} failed:\n{result.stderr}")


def _signed_cert(
    directory: Path, name: str, cn: str, ips: Sequence[str], dns: Sequence[str]
) -> None:
    key, csr, crt = (directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    ext = directory / f"{name}.ext"
    alt = ",".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{d}" for d in dns)])
    ext.write_text(
        (f"subjectAltName={alt}\n" if alt else "")
        + "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl("genrsa", "-out", key, "2048")
    _openssl("req", "-new", "-key", key, "-subj", f"/CN={cn}", "-out", csr)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", directory / "ca.crt", "-CAkey", directory / "ca.key",
        "-CAcreateserial", "-days", "30", "-sha256", "-extfile", ext, "-out", crt,
    )  # fmt: skip


def make_pki(
    directory: Path, apiserver_ips: Sequence[str], kubelet_ips: Sequence[str]
) -> ClusterPKI:
    """Write a fresh CA, serving certificates for the given IPs and a token-signing key."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-sha256",
        "-subj", "/CN=kvbench-test-ca",
        "-keyout", directory / "ca.key", "-out", directory / "ca.crt",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    _signed_cert(
        directory,
        "apiserver",
        "kube-apiserver",
        apiserver_ips,
        [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
    )
    _signed_cert(directory, "kubelet", "kvbench-node-agent", kubelet_ips, ["localhost"])
    _signed_cert(directory, "kubelet-client", "kube-apiserver-kubelet-client", [], [])
    _openssl("genrsa", "-out", directory / "sa.key", "2048")
    _openssl("rsa", "-in", directory / "sa.key", "-pubout", "-out", directory / "sa.pub")
    return ClusterPKI(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        apiserver_cert=directory / "apiserver.crt",
        apiserver_key=directory / "apiserver.key",
        kubelet_cert=directory / "kubelet.crt",
        kubelet_key=directory / "kubelet.key",
        kubelet_client_cert=directory / "kubelet-client.crt",
        kubelet_client_key=directory / "kubelet-client.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
