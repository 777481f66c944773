"""A small async client of the apiserver (httpx), with list-then-watch reflectors.

The node agent and the service proxy need only a handful of calls; raw JSON keeps
them close to what a kubelet or kube-proxy sends, with no model conversions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from kvbench.testing.controlplane import ApiAccess

__all__ = ["KubeApi", "KubeApiError", "Reflector"]

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class KubeApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


class KubeApi:
    """JSON calls against one apiserver with one bearer token."""

    def __init__(self, access: ApiAccess) -> None:
        self.client = httpx.AsyncClient(
            base_url=access.server,
            verify=access.ssl_context(),
            headers=access.headers(),
            timeout=httpx.Timeout(30.0, read=None),
        )

    async def close(self) -> None:
        await self.client.aclose()

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Obj:
        response = await self.client.request(method, path, json=body, **kw)
        if response.status_code >= 400:
            raise KubeApiError(response.status_code, response.text)
        return response.json()

    async def get(self, path: str, **params: Any) -> Obj:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body)

    async def patch(self, path: str, body: Obj, strategic: bool = True) -> Obj:
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return await self.request(
            "PATCH", path, body, headers={"Content-Type": f"application/{kind}+json"}
        )

    async def delete(self, path: str, body: Obj | None = None) -> Obj:
        return await self.request("DELETE", path, body)


class Reflector:
    """Keeps `objects` in step with a collection: list, then watch, relist on expiry.

    `on_change(event_type, obj)` runs for every change (ADDED, MODIFIED, DELETED),
    relists included, one at a time in order.
    """

    def __init__(
        self,
        api: KubeApi,
        path: str,
        on_change: Callable[[str, Obj], Awaitable[None]],
        **params: str,
    ) -> None:
        self.api = api
        self.path = path
        self.params = params
        self.on_change = on_change
        self.objects: dict[str, Obj] = {}
        self.synced = asyncio.Event()

    @staticmethod
    def key(obj: Obj) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    async def run(self) -> None:
        while True:
            try:
                version = await self._relist()
                self.synced.set()
                await self._watch(version)
            except (httpx.HTTPError, KubeApiError, json.JSONDecodeError) as err:
                log.warning("reflector %s: %s; relisting", self.path, err)
                await asyncio.sleep(1.0)

    async def _notify(self, event: str, obj: Obj) -> None:
        """Run the handler; a failure is logged with its traceback, not fatal to the watch."""
        try:
            await self.on_change(event, obj)
        except Exception:
            log.exception("reflector %s: handling %s of %s failed", self.path, event, self.key(obj))

    async def _relist(self) -> str:
        listed = await self.api.get(self.path, **self.params)
        fresh = {self.key(item): item for item in listed["items"]}
        for key in list(self.objects):
            if key not in fresh:
                await self._notify("DELETED", self.objects.pop(key))
        for key, obj in fresh.items():
            event = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = obj
            await self._notify(event, obj)
        return str(listed["metadata"]["resourceVersion"])

    async def _watch(self, version: str) -> None:
        params = {
            **self.params,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        async with self.api.client.stream("GET", self.path, params=params) as response:
            if response.status_code >= 400:
                raise KubeApiError(response.status_code, (await response.aread()).decode())
            async for line in response.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    return  # usually 410 Gone: our version expired, relist
                if kind == "BOOKMARK":
                    continue
                key = self.key(obj)
                if kind == "DELETED":
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = obj
                await self._notify(kind, obj)
