"""A GPU shared by several workers, as article 002 ran four vLLM servers on one 24 GB GPU.

Several processes on one GPU without MPS are time-sliced: the GPU runs one context at a time
and the contexts with work take turns (the GPU Operator's time-slicing "replicas" hand one GPU
to several pods this way, with no memory or fault isolation between them, unlike MIG). On the
H200, with its default time slice, a process with long kernels holds the GPU about 2 ms before
a waiting one runs (`bench/gpu_timeslice.py`). MPS instead runs the kernels of several
processes at once on separate SMs, which helps only where one worker's kernels leave SMs idle.
What the simulator models is time-slicing, in two rules measured on real vLLM 0.25 with six
workers on one H200 (`bench/results/real-vllm-0.25-h200-shared.txt`, `-prefill.txt`):

- a step CUDA graphs cover (every decode step, short mixed steps) has its GPU time (its
  rooflines) multiplied by the number of workers on the GPU running a step when it starts,
  this one included; its host part (scheduling, sampling, the per-step overhead) is not, each
  server having its own CPU. In a steady state where k workers decode, every step takes k
  times its GPU time: the ITL measured at 1 to 6 busy workers.
- a step beyond the captured graphs (a long prefill chunk, launched kernel by kernel) first
  waits for what is left of the steps the others are running when it starts (of each no more
  than its own work: a step that is itself waiting passes none of its wait on), then runs
  alone; the others' steps that start meanwhile count it as running. A 2,048-token prefill beside
  five decoding workers took 1.7-2x its time alone, not 6x, and its extra time hardly grew
  with its length: the steps it waits for, not a share of its own work.

Counting at a step's start is the approximation: a step that starts alone runs at full speed
even if another starts while it runs (that other one counts it). Long steps started together on
several workers are queued here, where real vLLM time-slices them and they end together
(docs/simulator.md, "GPUs shared by several workers").

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

_SLOT = struct.Struct("<dd")
MAX_WORKERS_PER_GPU = 64
"""Slots a shared GPU's file holds (the `workersPerGpu` limit)."""


class GpuShare(ABC):
    """One worker's view of the GPU it shares; times are the worker's virtual seconds."""

    @abstractmethod
    def others_running(self, at: float) -> int:
        """How many other workers on the GPU are running a step at `at`."""

    @abstractmethod
    def others_remaining(self, at: float) -> float:
        """The GPU work left, summed, of the steps the other workers on the GPU are running
        at `at`: of each, what is left of it, but no more than its own work (a step still
        waiting for others does not pass its wait on: waits never compound)."""

    @abstractmethod
    def occupy(self, start: float, end: float, waiting: float = 0.0) -> None:
        """This worker runs a step (or steps back to back) from `start` to `end`, the first
        `waiting` seconds of it waiting for the other workers' steps."""

    @abstractmethod
    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Set how this worker's virtual seconds map onto monotonic wall seconds (where the
        share is kept on the wall clock)."""


def _left(ends_and_work: list[tuple[float, float]], now: float) -> float:
    """What `others_remaining` sums, on one clock."""
    total = 0.0
    for end, work in ends_and_work:
        if end > now:
            total += end - now if end - now < work else work
    return total


class InProcessGpu:
    """A GPU shared by engines on one virtual clock; `member(slot)` is each one's view."""

    def __init__(self) -> None:
        self._until: dict[int, float] = {}
        self._work: dict[int, float] = {}

    def member(self, slot: int) -> GpuShare:
        if slot in self._until:
            raise ValueError(f"slot {slot} of the shared GPU is taken")
        self._until[slot] = float("-inf")
        self._work[slot] = 0.0
        return _InProcessMember(self._until, self._work, slot)


class _InProcessMember(GpuShare):
    __slots__ = ("_slot", "_until", "_work")

    def __init__(self, until: dict[int, float], work: dict[int, float], slot: int) -> None:
        self._until, self._work, self._slot = until, work, slot

    def others_running(self, at: float) -> int:
        return sum(1 for s, end in self._until.items() if s != self._slot and end > at)

    def others_remaining(self, at: float) -> float:
        work = self._work
        return _left([(end, work[s]) for s, end in self._until.items() if s != self._slot], at)

    def occupy(self, start: float, end: float, waiting: float = 0.0) -> None:
        self._until[self._slot] = end
        self._work[self._slot] = end - start - waiting

    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Engines on one virtual clock compare virtual times: nothing to map."""


class FileGpuShare(GpuShare):
    """A GPU shared by worker processes: `path` holds one slot per worker, the monotonic wall
    time (system-wide on Linux) at which its current step ends and the wall seconds of it
    that are its own work. A worker's virtual times are turned into wall times by `bind`'s
    mapping (its clock's origin and time scale), so processes started at different times
    compare on one clock."""

    def __init__(self, path: Path, slot: int) -> None:
        if not 0 <= slot < MAX_WORKERS_PER_GPU:
            raise ValueError(f"shared GPU slot {slot}: not in 0..{MAX_WORKERS_PER_GPU - 1}")
        self.path, self.slot = path, slot
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._to_wall: Callable[[float], float] | None = None
        self._occupy_wall(0.0, 0.0)

    def bind(self, to_wall: Callable[[float], float]) -> None:
        self._to_wall = to_wall

    def _wall(self, virtual: float) -> float:
        if self._to_wall is None:
            raise RuntimeError("FileGpuShare used before bind(): no wall clock to share on")
        return self._to_wall(virtual)

    def _others(self, now: float) -> list[tuple[float, float]]:
        """(end, own work) in wall seconds of the other workers' steps running at `now`."""
        data = os.pread(self._fd, MAX_WORKERS_PER_GPU * _SLOT.size, 0)
        whole = len(data) - len(data) % _SLOT.size
        return [
            (end, work)
            for slot, (end, work) in enumerate(_SLOT.iter_unpack(data[:whole]))
            if slot != self.slot and end > now
        ]

    def others_running(self, at: float) -> int:
        return len(self._others(self._wall(at)))

    def others_remaining(self, at: float) -> float:
        """In this worker's virtual seconds: wall seconds divided by its time scale."""
        now = self._wall(at)
        others = self._others(now)
        if not others:
            return 0.0
        return _left(others, now) / (self._wall(at + 1.0) - now)

    def occupy(self, start: float, end: float, waiting: float = 0.0) -> None:
        wall_end = self._wall(end)
        self._occupy_wall(wall_end, wall_end - self._wall(start + waiting))

    def _occupy_wall(self, end: float, work: float) -> None:
        os.pwrite(self._fd, _SLOT.pack(end, work), self.slot * _SLOT.size)

    def close(self) -> None:
        os.close(self._fd)
