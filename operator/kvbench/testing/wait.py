"""Waiting on a cluster's state: poll a condition until it holds, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll `check()` until it returns something truthy and return that.

    A timeout is a safety net for a hung test, not a measurement: it raises
    TimeoutError naming `what` and the last value (or error) seen.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
        except Exception as err:  # the state may not exist yet: keep polling
            value, last = None, err  # type: ignore[assignment]
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout}s (last: {last!r})")
        time.sleep(interval)
