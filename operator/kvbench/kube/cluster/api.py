"""Calls to the API server from the back end's event loop, with one retry policy."""

import asyncio
import functools
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from kvbench.kube.objects import KubeObjects
from kvbench.kube.results import with_retries
from kvbench.runner.failures import ApiUnavailable, Forbidden

__all__ = ["API_PATIENCE", "WATCH_SLICE", "KubeApi"]

WATCH_SLICE = 5
"""Seconds a watch runs before it is renewed: bounds how long a cancelled wait's thread
lives on."""
API_PATIENCE = 60.0
"""Seconds a transient API error (5xx, 429, 409, no connection) is retried before it fails
the attempt."""


class KubeApi:
    """The typed clients of one namespace, and `call` to use them off the event loop."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.objects = KubeObjects(client)
        self.core = self.objects.core
        self.batch = self.objects.batch

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A blocking API call in a thread. An API server that is restarting, overloaded or
        refusing writes for a while (5xx, 429, 409, no connection) is retried with back-off
        for `API_PATIENCE` seconds (`with_retries`, the load generator's own policy), then
        becomes a typed failure: a passing outage must not cost a run its attempt. Every call
        kvbench makes is idempotent (apply, delete by UID, reads), so a repeat is safe."""
        name = getattr(fn, "__name__", str(fn))
        call = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.to_thread(with_retries, call, name, API_PATIENCE)
        except ApiException as err:
            if err.status in (401, 403):
                raise Forbidden(f"API server refused {name}: {err.body}") from err
            if err.status >= 500 or err.status in (409, 429):
                raise ApiUnavailable(
                    f"API server answered {err.status}: {err.reason} ({name}, for "
                    f"{API_PATIENCE:.0f} s)"
                ) from err
            raise
        except (ConnectionError, OSError, urllib3.exceptions.HTTPError) as err:
            raise ApiUnavailable(f"API server unreachable: {err}") from err

    def delete_pod(self, name: str, uid: str, grace_seconds: int = 5) -> None:
        """Delete that very pod (by UID: never its replacement, which its controller may
        already have made)."""
        body = kubernetes.client.V1DeleteOptions(
            grace_period_seconds=grace_seconds,
            preconditions=kubernetes.client.V1Preconditions(uid=uid),
        )
        try:
            self.core.delete_namespaced_pod(name, self.namespace, body=body)
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    async def log_tail(self, pod: str, lines: int, previous: bool = False) -> str:
        try:
            return await self.call(
                self.core.read_namespaced_pod_log,
                pod,
                self.namespace,
                tail_lines=lines,
                previous=previous,
            )
        except Exception as err:
            return f"(no log: {err})"
