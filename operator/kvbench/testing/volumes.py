"""A pod's volumes on local disk, and the private mount namespace that shows them.

configMap, secret and emptyDir volumes become directories under the pod's own
directory; hostPath and claimed (persistentVolumeClaim) volumes are host paths.
Each container runs under `unshare -m --propagation private`, bind-mounting them
at their mount paths: the process sees them where its manifest says, the rest of
the machine does not. Mount points that had to be
created on the host are removed when the last pod of the machine using them stops.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from kvbench.testing.podenv import ContainerConfigError, Fetch

__all__ = [
    "MOUNT_POINTS_REGISTRY",
    "Mount",
    "MountPoints",
    "materialize_volumes",
    "mounts_for",
    "wrap_in_namespace",
]

Obj = dict[str, Any]


class Mount(BaseModel):
    source: Path
    target: Path
    read_only: bool = False


def _write_items(directory: Path, data: dict[str, bytes], spec: Obj) -> None:
    mode = spec.get("defaultMode", 0o644)
    items = spec.get("items")
    chosen = (
        [(i["key"], i["path"], i.get("mode", mode)) for i in items]
        if items
        else [(k, k, mode) for k in data]
    )
    for key, rel, item_mode in chosen:
        if key not in data:
            if spec.get("optional"):
                continue
            raise ContainerConfigError(f"key {key!r} missing from volume source")
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])
        path.chmod(item_mode)


async def materialize_volumes(pod: Obj, root: Path, fetch: Fetch) -> dict[str, Path]:
    """Create every volume of `pod` under `root`; returns volume name -> host path."""
    namespace = pod["metadata"]["namespace"]
    paths: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes", []):
        name = volume["name"]
        directory = root / name
        if "persistentVolumeClaim" in volume:
            paths[name] = await _claimed_path(volume["persistentVolumeClaim"], namespace, fetch)
            continue
        if "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
                host.mkdir(parents=True, exist_ok=True)
            paths[name] = host
            continue
        directory.mkdir(parents=True, exist_ok=True)
        paths[name] = directory
        if "emptyDir" in volume:
            continue
        if "configMap" in volume or "secret" in volume:
            kind = "configmaps" if "configMap" in volume else "secrets"
            spec = volume.get("configMap") or volume["secret"]
            source = await fetch(kind, namespace, spec.get("name") or spec.get("secretName"))
            if source is None:
                if spec.get("optional"):
                    continue
                raise ContainerConfigError(f"{kind[:-1]} for volume {name!r} not found")
            data = {k: v.encode() for k, v in (source.get("data") or {}).items()}
            if kind == "secrets":
                data = {k: base64.b64decode(v) for k, v in data.items()}
            else:
                binary = source.get("binaryData") or {}
                data.update({k: base64.b64decode(v) for k, v in binary.items()})
            _write_items(directory, data, spec)
            continue
        raise ContainerConfigError(
            f"volume {name!r}: only configMap, secret, emptyDir, hostPath and "
            "persistentVolumeClaim are supported"
        )
    return paths


async def _claimed_path(source: Obj, namespace: str, fetch: Fetch) -> Path:
    """The directory of the volume bound to a claim (a hostPath or local volume)."""
    claim_name = source["claimName"]
    claim = await fetch("persistentvolumeclaims", namespace, claim_name)
    volume_name = (claim or {}).get("spec", {}).get("volumeName")
    if not volume_name:
        raise ContainerConfigError(f"persistentvolumeclaim {claim_name!r} is not bound")
    volume = await fetch("persistentvolumes", "", volume_name)
    spec = (volume or {}).get("spec", {})
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
    if not path:
        raise ContainerConfigError(
            f"persistentvolume {volume_name!r} has no hostPath or local path"
        )
    return Path(path)


def mounts_for(container: Obj, volumes: dict[str, Path]) -> list[Mount]:
    mounts = []
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise ContainerConfigError(f"volumeMount {mount['name']!r} names no volume")
        source = volumes[mount["name"]] / mount.get("subPath", "")
        mounts.append(
            Mount(
                source=source,
                target=Path(mount["mountPath"]),
                read_only=bool(mount.get("readOnly", False)),
            )
        )
    return mounts


MOUNT_POINTS_REGISTRY = Path(os.environ.get("KVBENCH_MOUNT_POINTS", "/tmp/kvbench-mount-points"))
"""Where every node agent of the machine records which mount targets it uses (beside the
slot locks of `kvbench.testing.layout`)."""


class MountPoints:
    """Host paths created as mount targets, removed when no pod on the machine uses them.

    A target is shared by every node agent of the machine: each test cluster's pods mount
    their service account token at /var/run/secrets/kubernetes.io/serviceaccount. Removing
    a directory that another agent's pod has bound unmounts it in that pod (Linux lazily
    detaches mounts on a removed mount point), so one agent must never remove what another
    still uses. Each agent holds a shared flock on the target's file in `registry` while its
    pods use the target (the kernel drops it if the agent dies); on release, the agent that
    can take it exclusively is the last user and removes what was created for the target,
    which the file lists whoever created it. One exclusive lock of the registry orders the
    checks and changes of every agent.
    """

    def __init__(self, registry: Path = MOUNT_POINTS_REGISTRY) -> None:
        self._registry = registry
        self._users: Counter[Path] = Counter()
        self._held: dict[Path, IO[str]] = {}

    @contextlib.contextmanager
    def _serialized(self) -> Iterator[None]:
        self._registry.mkdir(parents=True, exist_ok=True)
        with (self._registry / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _record(self, target: Path) -> Path:
        return self._registry / f"{hashlib.sha256(str(target).encode()).hexdigest()[:32]}.json"

    def acquire(self, mount: Mount) -> None:
        target = mount.target
        self._users[target] += 1
        if self._users[target] > 1:
            return
        with self._serialized():
            record = self._record(target).open("a+")
            fcntl.flock(record, fcntl.LOCK_SH)
            self._held[target] = record
            if target.exists() or target.is_symlink():
                return
            created = [parent for parent in reversed(target.parents) if not parent.exists()]
            for parent in created:
                parent.mkdir()
            if mount.source.is_dir():
                target.mkdir()
            else:
                target.touch()
            created.append(target)
            record.truncate(0)
            record.write(json.dumps([str(path) for path in created]))
            record.flush()

    def release(self, mount: Mount) -> None:
        target = mount.target
        self._users[target] -= 1
        if self._users[target] > 0:
            return
        del self._users[target]
        with self._serialized(), self._held.pop(target) as record:
            try:
                fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another agent's pods still use it: the last of them removes it
            record.seek(0)
            try:
                created = json.loads(record.read() or "[]")
            except ValueError:  # torn by an agent killed mid-write: leave the paths be
                created = []
            for path in map(Path, reversed(created)):
                with contextlib.suppress(OSError):
                    path.rmdir() if path.is_dir() else path.unlink()
            self._record(target).unlink(missing_ok=True)


def wrap_in_namespace(argv: list[str], mounts: list[Mount]) -> list[str]:
    """`argv` run in a private mount namespace with `mounts` bound; unchanged without mounts."""
    if not mounts:
        return argv
    steps = []
    for mount in mounts:
        source, target = shlex.quote(str(mount.source)), shlex.quote(str(mount.target))
        steps.append(f"mount --bind {source} {target}")
        if mount.read_only:
            steps.append(f"mount -o remount,bind,ro {target}")
    script = " && ".join([*steps, 'exec "$@"'])
    unshare = ["unshare", "-m", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.insert(1, "--map-root-user")
    return [*unshare, "--", "/bin/sh", "-c", script, "sh", *argv]
