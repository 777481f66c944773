"""Manifests the harness tests share: pods of the project's image running the echo server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["ECHO_SERVER", "PROJECT_IMAGE", "echo_container", "pod"]

ECHO_SERVER = Path(__file__).with_name("echo_server.py")
PROJECT_IMAGE = "ghcr.io/kvbench/kvbench:test"


def echo_container(name: str = "echo", **extra: Any) -> dict[str, Any]:
    """A container of the project's image running the echo server on its pod IP."""
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *extra.pop("env", []),
    ]
    return {
        "name": name,
        "image": PROJECT_IMAGE,
        "command": ["python", str(ECHO_SERVER)],
        "env": env,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
        **extra,
    }


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), **spec},
    }
