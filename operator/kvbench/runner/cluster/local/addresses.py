"""Loopback addresses for local workers: one 127.x address per worker, as pods have one IP
each (ports come from the kernel: `kvbench.procs.free_port`)."""

import random

__all__ = ["LoopbackBlock"]


class LoopbackBlock:
    """A /24 inside 127.0.0.0/8 for one local cluster, picked at random so that concurrent
    clusters (parallel tests, two experiments) rarely share addresses; ports keep them apart
    when they do."""

    def __init__(self, rng: random.Random | None = None) -> None:
        rng = rng or random.Random()
        self.prefix = f"127.{rng.randint(64, 126)}.{rng.randint(1, 254)}"
        self._next = 1

    def address(self) -> str:
        """The next unused address of the block."""
        if self._next > 253:
            raise RuntimeError(f"loopback block {self.prefix}.0/24 is exhausted")
        host = f"{self.prefix}.{self._next}"
        self._next += 1
        return host
