"""A GPU shared by several workers, as article 002 ran four vLLM servers on one 24 GB GPU.

Several processes on one GPU without MPS are time-sliced: the GPU runs one context at a time
and the contexts with work take turns (the GPU Operator's time-slicing "replicas" hand one GPU
to several pods this way, with no memory or fault isolation between them, unlike MIG). On the
H200, with its default time slice, a process with long kernels holds the GPU about 2 ms before
a waiting one runs (`bench/gpu_timeslice.py`). MPS instead runs the kernels of several
processes at once on separate SMs, which helps only where one worker's kernels leave SMs idle.
What the simulator models is time-slicing, in three rules measured on real vLLM 0.25 with three
to six workers on one GPU (`bench/results/real-vllm-0.25-h200-shared.txt`, `-prefill.txt`,
`-arms-shared.txt`):

- a step CUDA graphs cover (every decode step, short mixed steps) has its GPU time (its
  rooflines) multiplied by the number of workers on the GPU running a step when it starts,
  this one included; its host part (scheduling, sampling, the per-step overhead) is not, each
  server having its own CPU. In a steady state where k workers decode, every step takes k
  times its GPU time: the ITL measured at 1 to 6 busy workers.
- a step beyond the captured graphs (a long prefill chunk, launched kernel by kernel) first
  waits for what is left of the captured steps the others are running when it starts (of each
  no more than its own work), then runs. A 2,048-token prefill beside five decoding workers
  took 1.7-2x its time alone, not 6x, and its extra time hardly grew with its length: the
  steps it waits for, not a share of its own work.
- the GPU work of long steps on several workers at once is shared while they overlap
  (processor sharing, the limit of round-robin time slices far shorter than the steps): n of
  them each get 1/n of the GPU. A step launched kernel by kernel keeps the GPU busy only a
  share f of its time (`TimingProfile.uncaptured_gpu_fraction`), the host launching the rest,
  and it ends no sooner than alone: n such steps together take max(1, n f) times as long. On
  real vLLM (Qwen3-0.6B, two H100 hosts) 2,371-token misses started together on 1, 2, 3 and
  6 workers of one GPU reached their first tokens at 1.0, 1.0, 1.0 and 1.5 times one alone's
  on a slow host, 1.0, 1.2, 1.6 and 2.9 times on a fast one: about the same GPU work under
  more or less launching (`bench/results/real-vllm-h100-together.txt`). Run one after
  another, as before, the worker that started first would free long before the others. A
  long step's end therefore moves when another starts during it: `begin_long` gives the end
  as far as is known, `long_end` the end once the caller's clock reaches it.

Counting at a step's start is the approximation of the first rule: a step that starts alone
runs at full speed even if another starts while it runs (that other one counts it).

Processor sharing is kept by its virtual time (as fair queueing keeps it): the GPU's virtual
time V advances at 1/n per second while n long steps run, a step of GPU work w that begins
when V is v ends when V reaches v + w, so a later step changes how fast V runs, never the
marks already given.

`GpuShare` is what the engine asks; `FileGpuShare` shares a GPU among `kvbench sim serve`
processes on the wall clock, `InProcessGpu` among engines of one process (virtual time).
"""

from __future__ import annotations

import fcntl
import math
import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["FileGpuShare", "GpuShare", "InProcessGpu"]

MAX_WORKERS_PER_GPU = 64
"""Slots a shared GPU's file holds (the `workersPerGpu` limit)."""


@dataclass(slots=True)
class _LongStep:
    """One worker's step beyond the CUDA graphs, on the share's clock."""

    ready: float
    """When its GPU work may begin: its start plus what it waits for."""
    work: float
    """Its GPU seconds."""
    tail: float
    """Host seconds after its GPU work (the per-step overhead)."""
    floor: float
    """The earliest it can end: its time alone (the host launching its kernels one by one
    takes longer than they run)."""
    mark: float = math.nan
    """The virtual time at which its GPU work is done; NaN until it began."""
    done: float = math.nan
    """When its GPU work was done; NaN until then."""

    def end(self, done: float) -> float:
        return max(done + self.tail, self.floor)


@dataclass(slots=True)
class _Slot:
    short_end: float = -math.inf
    """When its current captured step ends."""
    short_work: float = 0.0
    long: _LongStep | None = None


@dataclass(slots=True)
class _GpuState:
    """Every slot of one GPU, and the virtual time V of its long steps at `at`."""

    slots: list[_Slot]
    at: float = -math.inf
    v: float = 0.0
    _ends: dict[int, float] | None = field(default=None, repr=False)

    def advance(self, until: float) -> None:
        """Process the long steps' beginnings and ends up to `until`."""
        self._ends = None
        self.at, self.v = _share(self._unfinished(), self.at, self.v, until)

    def long_ends(self) -> dict[int, float]:
        """When each slot's last long step ends (if unfinished, if no other begins)."""
        if self._ends is None:
            ahead = {i: replace(step) for i, step in self._unfinished().items()}
            _share(ahead, self.at, self.v, math.inf)
            self._ends = {
                i: s.long.end(ahead[i].done if i in ahead else s.long.done)
                for i, s in enumerate(self.slots)
                if s.long is not None
            }
        return self._ends

    def _unfinished(self) -> dict[int, _LongStep]:
        return {
            i: s.long
            for i, s in enumerate(self.slots)
            if s.long is not None and math.isnan(s.long.done)
        }


def _share(
    steps: dict[int, _LongStep], at: float, v: float, until: float
) -> tuple[float, float]:
    """Processor sharing of `steps` from (`at`, V = `v`) to `until` (inf: until all are done):
    marks the steps that begin and end on the way; returns the new (at, V). V is set to a mark
    where a step ends, never summed up to it, so rounding cannot leave one unfinished."""
    left = list(steps.values())
    while left:
        running = [s for s in left if not math.isnan(s.mark)]
        n = len(running)
        begin = min((s.ready for s in left if math.isnan(s.mark)), default=math.inf)
        first = min((s.mark for s in running), default=math.inf)
        finish = at + (first - v) * n if n else math.inf
        if min(begin, finish) > until or min(begin, finish) == math.inf:
            break
        if finish <= begin:
            at, v = max(finish, at), first
            for s in running:
                if s.mark <= first:
                    s.done = at
        else:
            nxt = max(begin, at)
            if n:
                v = min(v + (nxt - at) / n, first)
            at = nxt
        for s in left:
            if math.isnan(s.mark) and s.ready <= at:
                s.mark = v + s.work
        left = [s for s in left if math.isnan(s.done)]
    if until != math.inf and until > at:
        n = sum(1 for s in left if not math.isnan(s.mark))
        if n:
            v += (until - at) / n
        at = until
    return at, v


class GpuShare(ABC):
    """One worker's view of the GPU it shares; times are the worker's virtual seconds."""

    def __init__(self, slot: int) -> None:
        if not 0 <= slot < MAX_WORKERS_PER_GPU:
            raise ValueError(f"shared GPU slot {slot}: not in 0..{MAX_WORKERS_PER_GPU - 1}")
        self.slot = slot

    def others_running(self, at: float) -> int:
        """How many other workers on the GPU are running a step at `at`."""
        state, now = self._read(), self._share_time(at)
        ends = state.long_ends()
        return sum(
            1
            for i, s in enumerate(state.slots)
            if i != self.slot and (s.short_end > now or ends.get(i, -math.inf) > now)
        )

    def others_remaining(self, at: float) -> float:
        """The GPU work left, summed, of the captured steps the other workers on the GPU are
        running at `at`: of each, what is left of it, but no more than its own work."""
        state, now = self._read(), self._share_time(at)
        left = 0.0
        for i, s in enumerate(state.slots):
            if i != self.slot and s.short_end > now:
                left += min(s.short_end - now, s.short_work)
        return left / self._scale()

    @abstractmethod
    def occupy(self, start: float, end: float) -> None:
        """This worker runs captured steps back to back from `start` to `end`."""

    def begin_long(self, start: float, wait: float, work: float, tail: float,
                   floor: float) -> float:  # fmt: skip
        """This worker starts a step beyond the graphs at `start`: `wait` seconds for the
        others' captured steps, then `work` seconds of GPU work shared with the other long
        steps, then `tail` on the host, ending no sooner than `floor`. Returns its end as far
        as is known: another long step that begins before it moves it later."""
        scale = self._scale()
        with self._update() as state:
            state.advance(self._share_time(start))
            state.slots[self.slot].long = _LongStep(
                self._share_time(start + wait), work * scale, tail * scale,
                self._share_time(floor),
            )  # fmt: skip
            state.advance(state.at)
            end = state.long_ends()[self.slot]
        return self._virtual(end)

    def long_end(self, at: float) -> float:
        """The end of this worker's long step, with every long step begun by `at` (the
        caller's clock, which has reached the end last given)."""
        with self._update() as state:
            state.advance(self._share_time(at))
            own = state.slots[self.slot].long
            if own is None:
                raise RuntimeError("long_end() without begin_long()")
            end = state.long_ends()[self.slot]
        return self._virtual(end)

    @abstractmethod
    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Set how this worker's virtual seconds map onto monotonic wall seconds (where the
        share is kept on the wall clock)."""

    @abstractmethod
    def _read(self) -> _GpuState: ...

    @abstractmethod
    def _update(self) -> AbstractContextManager[_GpuState]:
        """The state to change: written back, the other workers kept out, until the block
        ends."""

    def _share_time(self, virtual: float) -> float:
        return virtual

    def _virtual(self, share: float) -> float:
        return share

    def _scale(self) -> float:
        return 1.0


class InProcessGpu:
    """A GPU shared by engines on one virtual clock; `member(slot)` is each one's view."""

    def __init__(self) -> None:
        self.state = _GpuState([])
        self._taken: set[int] = set()

    def member(self, slot: int) -> GpuShare:
        if slot in self._taken:
            raise ValueError(f"slot {slot} of the shared GPU is taken")
        member = _InProcessMember(self.state, slot)
        slots = self.state.slots  # as many as the highest member's: each step reads them all
        slots.extend(_Slot() for _ in range(slot + 1 - len(slots)))
        self._taken.add(slot)
        return member


class _InProcessMember(GpuShare):
    def __init__(self, state: _GpuState, slot: int) -> None:
        super().__init__(slot)
        self._state = state

    def occupy(self, start: float, end: float) -> None:
        own = self._state.slots[self.slot]
        own.short_end, own.short_work = end, end - start

    def bind(self, to_wall: Callable[[float], float]) -> None:
        """Engines on one virtual clock compare virtual times: nothing to map."""

    def _read(self) -> _GpuState:
        return self._state

    @contextmanager
    def _update(self) -> Iterator[_GpuState]:
        yield self._state


_HEADER = struct.Struct("<dd")
_LONG = struct.Struct("<dddddd")
_SHORT = struct.Struct("<dd")
_SHORTS = _HEADER.size + MAX_WORKERS_PER_GPU * _LONG.size
_SIZE = _SHORTS + MAX_WORKERS_PER_GPU * _SHORT.size


class FileGpuShare(GpuShare):
    """A GPU shared by worker processes through the file at `path`, in monotonic wall seconds
    (system-wide on Linux): the long steps' V and its moment, each slot's long step, each
    slot's captured step (its end and work). A worker's virtual times are turned into wall
    times by `bind`'s mapping (its clock's origin and time scale), so processes started at
    different times compare on one clock. The long steps are read and written under `flock`;
    a captured step is one write of the worker's own place, which no one else writes."""

    def __init__(self, path: Path, slot: int) -> None:
        super().__init__(slot)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._origin, self._per_second = math.nan, math.nan
        with self._update() as state:
            state.slots[slot].long = None
        self._write_short(-math.inf, 0.0)

    def bind(self, to_wall: Callable[[float], float]) -> None:
        self._origin = to_wall(0.0)
        self._per_second = to_wall(1.0) - self._origin

    def _share_time(self, virtual: float) -> float:
        if math.isnan(self._origin):
            raise RuntimeError("FileGpuShare used before bind(): no wall clock to share on")
        return self._origin + virtual * self._per_second

    def _virtual(self, share: float) -> float:
        return (share - self._origin) / self._per_second

    def _scale(self) -> float:
        return self._per_second

    def occupy(self, start: float, end: float) -> None:
        wall_start, wall_end = self._share_time(start), self._share_time(end)
        self._write_short(wall_end, wall_end - wall_start)

    def _write_short(self, end: float, work: float) -> None:
        os.pwrite(self._fd, _SHORT.pack(end, work), _SHORTS + self.slot * _SHORT.size)

    @contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        fcntl.flock(self._fd, how)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> _GpuState:
        with self._locked(fcntl.LOCK_SH):
            return self._load()

    def _load(self) -> _GpuState:
        # A fresh file reads as zeros: V 0 at the wall clock's 0, every step done at 0.
        data = os.pread(self._fd, _SIZE, 0).ljust(_SIZE, b"\0")
        at, v = _HEADER.unpack_from(data)
        longs = _LONG.iter_unpack(data[_HEADER.size : _SHORTS])
        shorts = _SHORT.iter_unpack(data[_SHORTS:])
        slots = [
            _Slot(end, work, None if math.isnan(step[0]) else _LongStep(*step))
            for step, (end, work) in zip(longs, shorts, strict=True)
        ]
        return _GpuState(slots, at, v)

    def _store(self, state: _GpuState) -> None:
        """The long steps only: each worker's captured steps are its own to write."""
        nan = (math.nan,) * 6
        parts = [_HEADER.pack(state.at, state.v)]
        for s in state.slots:
            step = s.long
            parts.append(_LONG.pack(*(nan if step is None else (
                step.ready, step.work, step.tail, step.floor, step.mark, step.done))))  # fmt: skip
        os.pwrite(self._fd, b"".join(parts), 0)

    @contextmanager
    def _update(self) -> Iterator[_GpuState]:
        with self._locked(fcntl.LOCK_EX):
            state = self._load()
            yield state
            self._store(state)

    def close(self) -> None:
        os.close(self._fd)
