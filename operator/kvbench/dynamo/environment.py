"""Environment for Dynamo processes on loopback: file discovery, no etcd, no NATS.

Dynamo 1.6.1 finds its peers through a discovery backend; with `file` it keeps the
registrations (instances, model cards, event channels) as files under `DYN_FILE_KV`, so
one directory per deployment isolates concurrent deployments from each other. Every
listener is pinned to the loopback host; the request plane (TCP), event plane (ZMQ) and
system status server ports are left to the kernel. `HOME` and `TMPDIR` point into the
scratch directory because Dynamo caches model cards under `~/.cache/dynamo` and defaults
some state to `$TMPDIR`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["dynamo_env", "registered_instance_ids"]

_INHERITED = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "SSL_CERT_FILE")


def dynamo_env(
    scratch: Path, host: str = "127.0.0.1", extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of one Dynamo process of the deployment whose scratch is `scratch`.

    Only a few variables are inherited, so a developer's own `DYN_*` settings cannot leak
    into a measurement.
    """
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    env.update(
        {
            "DYN_DISCOVERY_BACKEND": "file",
            "DYN_FILE_KV": str(scratch / "discovery"),
            "DYN_REQUEST_PLANE": "tcp",
            "DYN_EVENT_PLANE": "zmq",
            "DYN_TCP_RPC_HOST": host,
            "DYN_EVENT_PLANE_HOST": host,
            "DYN_TCP_RESPONSE_STREAM_HOST": host,
            "DYN_SYSTEM_HOST": host,
            "DYN_LOG": "info",
            "NO_COLOR": "1",
            "HOME": str(scratch / "home"),
            "TMPDIR": str(scratch / "tmp"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for sub in ("discovery", "home", "tmp"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    if extra:
        env.update(extra)
    return env


def registered_instance_ids(scratch: Path, component: str = "backend") -> set[int]:
    """Instance ids registered in the file discovery store for `component`'s generate endpoint.

    File discovery stores one file per instance under `v1/instances`, named by the
    URL-quoted `namespace/component/endpoint/<instance id in hex>`.
    """
    instances = scratch / "discovery" / "v1" / "instances"
    suffix = f"%2F{component}%2Fgenerate%2F"
    found: set[int] = set()
    if not instances.is_dir():
        return found
    for entry in instances.iterdir():
        _, marker, hex_id = entry.name.rpartition(suffix)
        if marker:
            found.add(int(hex_id, 16))
    return found
