"""Claims bound to local directories: a stand-in for a dynamic volume provisioner.

For every PersistentVolumeClaim without a volume, the agent creates a hostPath
PersistentVolume under its state directory, pre-bound to the claim; the real
persistent-volume controller then binds the two, and the scheduler places pods
that use the claim. Data outlives pods (as a StatefulSet's volumes do) and is
removed with the cluster.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kvbench.testing.kubeapi import KubeApi, KubeApiError

__all__ = ["PROVISIONER", "LocalProvisioner", "volume_for"]

Obj = dict[str, Any]
PROVISIONER = "kvbench.io/local-directory"
log = logging.getLogger(__name__)


def volume_for(claim: Obj, path: Path) -> Obj:
    """A hostPath PersistentVolume at `path` that satisfies `claim` and is bound to it."""
    meta, spec = claim["metadata"], claim["spec"]
    size = spec.get("resources", {}).get("requests", {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta['uid']}",
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": spec.get("storageClassName") or "",
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class LocalProvisioner:
    """Creates a directory-backed volume for each unbound claim it is told about."""

    def __init__(self, api: KubeApi, root: Path) -> None:
        self.api = api
        self.root = root

    async def on_claim(self, event: str, claim: Obj) -> None:
        if event == "DELETED" or claim["spec"].get("volumeName") or claim["spec"].get("selector"):
            return
        path = self.root / f"pvc-{claim['metadata']['uid']}"
        path.mkdir(parents=True, exist_ok=True)
        try:
            await self.api.create("/api/v1/persistentvolumes", volume_for(claim, path))
        except KubeApiError as err:
            if err.status != 409:  # 409: made on an earlier event already
                raise
            return
        log.info(
            "claim %s/%s: volume at %s", claim["metadata"]["namespace"],
            claim["metadata"]["name"], path,
        )  # fmt: skip
