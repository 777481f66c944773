"""Which slot a test cluster holds. Several clusters can run on one machine (a developer's
`kvbench testcluster up` beside a test session): each claims a slot with a lock file held for
its life, and the slot picks its address ranges (`kvbench.testing.node.network.NetworkPlan`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

__all__ = ["MAX_SLOTS", "SlotLock", "claim_slot"]

MAX_SLOTS = 32
_LOCK_DIR = Path(os.environ.get("KVBENCH_TESTCLUSTER_LOCKS", "/tmp/kvbench-testcluster-slots"))


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
