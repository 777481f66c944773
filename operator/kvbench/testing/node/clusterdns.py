"""Cluster DNS for the test cluster: Debian's dnsmasq answering `*.svc.cluster.local` from
the API, as CoreDNS's kubernetes plugin does (Debian has no CoreDNS).

A feeder lists Services and Endpoints and writes dnsmasq's hosts file (dnsmasq re-reads it on
SIGHUP): a Service with a ClusterIP has one A record, a headless one the addresses of its
ready endpoints, and an endpoint with a hostname (a StatefulSet member) its own
`HOSTNAME.SERVICE.NS.svc.cluster.local`. Names in cluster.local that do not exist are
NXDOMAIN; nothing is forwarded (no name outside the cluster resolves). dnsmasq listens on the
host's address on the node network; the `kube-dns` Service in kube-system points there, so pods
reach it through kube-proxy at the cluster DNS address the kubelets give them.

    python -m kvbench.testing.node.clusterdns KUBECONFIG LISTEN_IP STATE_DIR
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes

__all__ = ["DOMAIN", "dns_records", "main"]

DOMAIN = "cluster.local"
_POLL_SECONDS = 0.5
_PID_DIR = Path("/run/kvbench")


def dns_records(services: list[Any], endpoints: list[Any]) -> list[tuple[str, str]]:
    """(address, name) pairs for dnsmasq's hosts file, sorted."""
    ready: dict[tuple[str, str], list[tuple[str, str | None]]] = {}
    for item in endpoints:
        key = (item.metadata.namespace, item.metadata.name)
        for subset in item.subsets or []:
            for address in subset.addresses or []:
                ready.setdefault(key, []).append((address.ip, address.hostname))
    records: set[tuple[str, str]] = set()
    for service in services:
        meta, spec = service.metadata, service.spec
        name = f"{meta.name}.{meta.namespace}.svc.{DOMAIN}"
        if spec.type == "ExternalName":
            continue
        if spec.cluster_ip and spec.cluster_ip != "None":
            records.add((spec.cluster_ip, name))
            continue
        for ip, hostname in ready.get((meta.namespace, meta.name), []):
            records.add((ip, name))
            if hostname:
                records.add((ip, f"{hostname}.{name}"))
    return sorted(records)


def _hosts_text(records: list[tuple[str, str]]) -> str:
    return "".join(f"{ip} {name}\n" for ip, name in records)


def _dnsmasq(listen_ip: str, hosts: Path, log: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("dnsmasq")
    if binary is None:
        raise RuntimeError("dnsmasq is not installed (Debian: apt-get install dnsmasq-base)")
    argv = [
        binary, "--keep-in-foreground", "--user=root", "--no-resolv", "--no-hosts",
        "--no-negcache", f"--addn-hosts={hosts}", f"--listen-address={listen_ip}",
        "--bind-interfaces", "--except-interface=lo", f"--local=/{DOMAIN}/",
        "--domain-needed", "--log-facility=-", "--pid-file=",
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _replace_earlier(listen_ip: str) -> Path:
    """Stop the dnsmasq an earlier cluster of this address left (a killed harness's: dnsmasq
    sets its own credentials, which clears the parent-death signal, so it outlives its
    feeder) and return the file that records the new one's PID."""
    record = _PID_DIR / f"clusterdns-{listen_ip}.pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(record.read_text())
        if b"dnsmasq" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
            while Path(f"/proc/{pid}").exists():
                time.sleep(0.05)
    _PID_DIR.mkdir(parents=True, exist_ok=True)
    return record


def main(kubeconfig: str, listen_ip: str, state: str) -> None:
    directory = Path(state)
    directory.mkdir(parents=True, exist_ok=True)
    hosts = directory / "hosts"
    hosts.write_text("")
    record = _replace_earlier(listen_ip)
    server = _dnsmasq(listen_ip, hosts, directory / "dnsmasq.log")
    record.write_text(str(server.pid))
    signal.signal(signal.SIGTERM, lambda *_: (server.terminate(), sys.exit(0)))
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(kubeconfig))
    written = ""
    while server.poll() is None:
        try:
            services = core.list_service_for_all_namespaces(_request_timeout=5).items
            endpoints = core.list_endpoints_for_all_namespaces(_request_timeout=5).items
        except Exception as err:  # the control plane restarting: keep the last answers
            print(f"clusterdns: listing failed: {err}", file=sys.stderr, flush=True)
            time.sleep(1.0)
            continue
        text = _hosts_text(dns_records(services, endpoints))
        if text != written:
            hosts.write_text(text)
            server.send_signal(signal.SIGHUP)
            written = text
        time.sleep(_POLL_SECONDS)
    sys.exit(f"dnsmasq exited with {server.returncode}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
