"""Pod events as the kubelet reports them (Started, Killing, Unhealthy, BackOff...).

They make `kubectl describe pod` and `kubectl get events` tell what happened to a
pod on the test cluster, as they would on a real one. Posting is best effort:
a lost event never stops a pod.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from kvbench.testing.container import now_rfc3339
from kvbench.testing.kubeapi import KubeApi, KubeApiError

__all__ = ["EventRecorder"]

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class EventRecorder:
    """Posts core/v1 Events about pods, from the node the pod runs on."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, pod: Obj, container: str, kind: str, reason: str, message: str) -> None:
        """Queue one event (`kind` is Normal or Warning) about `container` of `pod`."""
        task = asyncio.get_running_loop().create_task(
            self._post(pod, container, kind, reason, message)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, pod: Obj, container: str, kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName", "")
        now = now_rfc3339()
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "fieldPath": f"spec.containers{{{container}}}",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": node,
        }
        try:
            await self.api.create(f"/api/v1/namespaces/{meta['namespace']}/events", event)
        except (KubeApiError, OSError, httpx.HTTPError) as err:
            log.debug("event %s for %s: %s", reason, meta["name"], err)
