"""Where a request goes: one target URL, or prefix-affinity straight to one pod per group.

Prefix-affinity uses rendezvous (highest-random-weight) hashing, a consistent hash: each
group goes to the pod with the highest hash of (pod, group), so removing a pod moves only the
groups it held. It is the upper bound of what a KV-aware router can reach: every request of a
prefix lands where that prefix is cached.
"""

import hashlib
from dataclasses import dataclass

from kvbench.loadgen.config import PrefixAffinityTarget, Target, UrlTarget
from kvbench.loadgen.workload import Request

__all__ = ["Route", "Router", "make_router"]


@dataclass(frozen=True, slots=True)
class Route:
    """The endpoint's name (pod, or the target URL) and the full request URL."""

    endpoint: str
    url: str


class Router:
    """Maps requests to routes; the mapping depends only on the request's routing key."""

    def __init__(self, endpoints: dict[str, str], path: str, affinity: bool) -> None:
        self._urls = {name: base.rstrip("/") + path for name, base in endpoints.items()}
        self._affinity = affinity
        self._cache: dict[str, Route] = {}

    def route(self, request: Request) -> Route:
        key = request.routing_key if self._affinity else ""
        route = self._cache.get(key)
        if route is None:
            name = _rendezvous(key, list(self._urls)) if self._affinity else next(iter(self._urls))
            route = self._cache[key] = Route(name, self._urls[name])
        return route


def _rendezvous(key: str, names: list[str]) -> str:
    def weight(name: str) -> bytes:
        return hashlib.sha256(f"{name}\x00{key}".encode()).digest()

    return max(names, key=weight)


def make_router(target: Target, path: str) -> Router:
    """A router for the config's target and API path."""
    if isinstance(target, UrlTarget):
        return Router({target.url: target.url}, path, affinity=False)
    assert isinstance(target, PrefixAffinityTarget)
    return Router(dict(target.pods), path, affinity=True)
