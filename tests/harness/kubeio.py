"""Small helpers the harness tests share: plain HTTP over a new connection, pod lookups."""

from __future__ import annotations

import os
import socket

import kubernetes

__all__ = ["http_get", "pid_alive", "pod_or_none", "ready_endpoint_ips"]


def http_get(host: str, port: int, path: str, timeout: float = 5.0) -> str:
    """GET over a brand-new TCP connection (so a Service picks a backend each time)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        raise ConnectionError(f"{host}:{port}{path}: {status.decode()}")
    return body.decode()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has stopped running too
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def pod_or_none(
    core: kubernetes.client.CoreV1Api, name: str, namespace: str
) -> kubernetes.client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, namespace)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise


def ready_endpoint_ips(
    cluster_api: kubernetes.client.ApiClient, namespace: str, service: str
) -> set[str]:
    """Addresses of ready endpoints in the Service's EndpointSlices (discovery v1beta1)."""
    slices = kubernetes.client.CustomObjectsApi(cluster_api).list_namespaced_custom_object(
        "discovery.k8s.io", "v1beta1", namespace, "endpointslices",
        label_selector=f"kubernetes.io/service-name={service}",
    )  # fmt: skip
    return {
        address
        for item in slices["items"]
        for endpoint in item.get("endpoints") or []
        if endpoint.get("conditions", {}).get("ready") is not False
        for address in endpoint["addresses"]
    }
