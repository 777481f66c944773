"""Where a request goes: one target URL, or prefix-affinity straight to one pod per group.

Prefix-affinity is consistent hashing with bounded loads over rendezvous (highest-random-
weight) ranks. Each pod ranks every group by a hash of (pod, group); when the number of
groups G is known (the shared-prefix workload), groups are placed in order, each on its
highest-ranked pod that holds fewer than ceil(G / pods) groups. Plain consistent hashing of a
handful of prefixes is lumpy (12 prefixes over 3 pods can land 6/2/4, and the pod with 6
evicts), which would understate what a KV-aware router can reach; with bounded loads no pod
holds more than its share, and every request of a prefix still lands where that prefix is
cached: the upper bound the affinity arm stands for. Requests without a group (other
workloads) are spread by plain rendezvous hashing of the request itself.
"""

import hashlib
import math
from collections import Counter
from dataclasses import dataclass

from kvbench.loadgen.config import LoadTarget, PrefixAffinityTarget, UrlTarget
from kvbench.loadgen.workload import Request

__all__ = ["Route", "Router", "bounded_assignment", "make_router"]


@dataclass(frozen=True, slots=True)
class Route:
    """The endpoint's name (pod, or the target URL) and the full request URL."""

    endpoint: str
    url: str


def _rank(key: str, names: list[str]) -> list[str]:
    """Pods in the order this key prefers them (rendezvous hashing)."""

    def weight(name: str) -> bytes:
        return hashlib.sha256(f"{name}\x00{key}".encode()).digest()

    return sorted(names, key=weight, reverse=True)


def bounded_assignment(groups: int, names: list[str]) -> dict[int, str]:
    """Group -> pod: each group, in order, on its best-ranked pod below ceil(G / pods)."""
    cap, load, owner = math.ceil(groups / len(names)), Counter[str](), {}
    for group in range(groups):
        pod = next(p for p in _rank(f"group-{group}", names) if load[p] < cap)
        owner[group] = pod
        load[pod] += 1
    return owner


class Router:
    """Maps requests to routes; the mapping depends only on the request's routing key."""

    def __init__(
        self, endpoints: dict[str, str], path: str, affinity: bool, groups: int | None = None
    ) -> None:
        self._urls = {name: base.rstrip("/") + path for name, base in endpoints.items()}
        self._affinity = affinity
        names = list(self._urls)
        self.owners = bounded_assignment(groups, names) if affinity and groups else {}
        self._cache: dict[str, Route] = {}

    def route(self, request: Request) -> Route:
        key = request.routing_key if self._affinity else ""
        route = self._cache.get(key)
        if route is None:
            route = self._cache[key] = self._place(request, key)
        return route

    def _place(self, request: Request, key: str) -> Route:
        if not self._affinity:
            name = next(iter(self._urls))
        elif request.group is not None and request.group in self.owners:
            name = self.owners[request.group]
        else:
            name = _rank(key, list(self._urls))[0]
        return Route(name, self._urls[name])


def make_router(target: LoadTarget, path: str, groups: int | None = None) -> Router:
    """A router for the config's target and API path; `groups` is the number of prefix
    groups when the workload has them."""
    if isinstance(target, UrlTarget):
        return Router({target.url: target.url}, path, affinity=False)
    assert isinstance(target, PrefixAffinityTarget)
    return Router(dict(target.pods), path, affinity=True, groups=groups)
