"""Where a test cluster lives on loopback: its slot, node, pod and service addresses.

Several clusters can run on one machine (a developer's `kvbench testcluster up`
beside a test session): each claims a slot with a lock file held for its life,
and the slot picks its address ranges. Slot 0 uses the service CIDR
127.96.0.0/16; slot k uses 127.(96+k).0.0/16 for services and 127.(64+k).0.0/16
for nodes (127.(64+k).0.N) and their pods (127.(64+k).N.0/24 on node N).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from pydantic import BaseModel, Field

__all__ = ["MAX_SLOTS", "ClusterLayout", "SlotLock", "claim_slot"]

MAX_SLOTS = 32
_LOCK_DIR = Path(os.environ.get("KVBENCH_TESTCLUSTER_LOCKS", "/tmp/kvbench-testcluster-slots"))


class ClusterLayout(BaseModel):
    """The address ranges of the cluster in one slot."""

    slot: int = Field(ge=0, lt=MAX_SLOTS)

    @property
    def service_cidr(self) -> str:
        return f"127.{96 + self.slot}.0.0/16"

    @property
    def kubernetes_service_ip(self) -> str:
        """The first service IP, which the apiserver gives the `kubernetes` Service."""
        return f"127.{96 + self.slot}.0.1"

    def node_ip(self, index: int) -> str:
        """Address of the node with this 0-based index; its kubelet API listens there."""
        return f"127.{64 + self.slot}.0.{index + 1}"

    def pod_cidr(self, index: int) -> str:
        return f"127.{64 + self.slot}.{index + 1}.0/24"


class SlotLock:
    """An exclusive claim on a slot, released when closed or when the process dies."""

    def __init__(self, slot: int, handle: IO[str]) -> None:
        self.slot = slot
        self._handle = handle

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def claim_slot() -> SlotLock:
    """Lock the lowest free slot, so concurrent clusters never share addresses."""
    _LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        handle = (_LOCK_DIR / f"slot-{slot}.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return SlotLock(slot, handle)
    raise RuntimeError(f"all {MAX_SLOTS} test-cluster slots are taken (locks in {_LOCK_DIR})")
