"""A GPU shared by several workers, as article 002 ran four vLLM servers on one 24 GB GPU.

Several processes on one GPU without MPS are time-sliced: the GPU runs one context at a time
and the contexts with work interleave (the GPU Operator's time-slicing "replicas" hand one GPU
to several pods this way, with no memory or fault isolation between them, unlike MIG). Over a
step of several milliseconds that is processor sharing: a step's GPU work runs at 1/k of the
GPU while k workers run steps. MPS instead runs the kernels of several processes at once on
separate SMs, which helps only where one worker's kernels leave SMs idle; a step that is bound
by memory bandwidth (every decode step of a small batch) is divided the same way. So one rule
covers both for the steps this simulator models: a step's GPU time (its rooflines) is
multiplied by the number of workers on the GPU running a step when it starts (this one
included); its host part (scheduling, sampling, the per-step overhead, launches in eager mode)
is not, each server having its own CPU. Counting at the start is the approximation: a step that
starts alone runs at full speed even if another starts while it runs (that other one counts
it); in a steady state where k workers are busy every step takes k times its GPU time, the
time-sliced share.

`GpuShare` is what the engine asks; `FileGpuShare` shares a GPU among `kvbench sim serve`
processes on the wall clock, `InProcessGpu` among engines of one process (virtual time).
"""

from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

__all__ = ["FileGpuShare", "GpuShare", "InProcessGpu"]

_SLOT = struct.Struct("<d")
MAX_WORKERS_PER_GPU = 64
"""Slots a shared GPU's file holds (the `workersPerGpu` limit)."""


class GpuShare(ABC):
    """One worker's view of the GPU it shares; times are the worker's virtual seconds."""

    @abstractmethod
    def others_running(self, at: float) -> int:
        """How many other workers on the GPU are running a step at `at`."""

    @abstractmethod
    def occupy(self, start: float, end: float) -> None:
        """This worker runs a step (or steps back to back) from `start` to `end`."""

    @abstractmethod
    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Set how this worker's virtual seconds map onto monotonic wall seconds (where the
        share is kept on the wall clock)."""


class InProcessGpu:
    """A GPU shared by engines on one virtual clock; `member(slot)` is each one's view."""

    def __init__(self) -> None:
        self._until: dict[int, float] = {}

    def member(self, slot: int) -> GpuShare:
        if slot in self._until:
            raise ValueError(f"slot {slot} of the shared GPU is taken")
        self._until[slot] = float("-inf")
        return _InProcessMember(self._until, slot)


class _InProcessMember(GpuShare):
    __slots__ = ("_slot", "_until")

    def __init__(self, until: dict[int, float], slot: int) -> None:
        self._until, self._slot = until, slot

    def others_running(self, at: float) -> int:
        return sum(1 for s, end in self._until.items() if s != self._slot and end > at)

    def occupy(self, start: float, end: float) -> None:
        self._until[self._slot] = end

    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Engines on one virtual clock compare virtual times: nothing to map."""


class FileGpuShare(GpuShare):
    """A GPU shared by worker processes: `path` holds one slot per worker, the monotonic wall
    time (system-wide on Linux) at which its current step ends. A worker's virtual times are
    turned into wall times by `bind`'s mapping (its clock's origin and time scale), so
    processes started at different times compare on one clock."""

    def __init__(self, path: Path, slot: int) -> None:
        if not 0 <= slot < MAX_WORKERS_PER_GPU:
            raise ValueError(f"shared GPU slot {slot}: not in 0..{MAX_WORKERS_PER_GPU - 1}")
        self.path, self.slot = path, slot
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._to_wall: Callable[[float], float] | None = None
        self._occupy_wall(0.0)

    def bind(self, to_wall: Callable[[float], float]) -> None:
        self._to_wall = to_wall

    def _wall(self, virtual: float) -> float:
        if self._to_wall is None:
            raise RuntimeError("FileGpuShare used before bind(): no wall clock to share on")
        return self._to_wall(virtual)

    def others_running(self, at: float) -> int:
        now = self._wall(at)
        data = os.pread(self._fd, MAX_WORKERS_PER_GPU * _SLOT.size, 0)
        whole = len(data) - len(data) % _SLOT.size
        return sum(
            1
            for slot, (end,) in enumerate(_SLOT.iter_unpack(data[:whole]))
            if slot != self.slot and end > now
        )

    def occupy(self, start: float, end: float) -> None:
        self._occupy_wall(self._wall(end))

    def _occupy_wall(self, end: float) -> None:
        os.pwrite(self._fd, _SLOT.pack(end), self.slot * _SLOT.size)

    def close(self) -> None:
        os.close(self._fd)
