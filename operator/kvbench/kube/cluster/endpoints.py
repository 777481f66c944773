"""The Service's endpoints through a measured window, watched.

A worker whose readiness probe fails under load leaves the Service's ready endpoints, and
kube-proxy sends it no new connection until it is back: the window then measured fewer
workers than the record says, however briefly. The EndpointSlices (what kube-proxy reads) are
watched from the load's start until it is collected; a worker that left them or was not ready
in them at any moment disturbs the run. What a restarted operator did not watch, the pods'
Ready transitions tell (`WorkerPods.check`).
"""

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kvbench.kube.cluster.api import WATCH_SLICE
from kvbench.runner.cluster.base import WorkerInfo

__all__ = ["EndpointLapses", "EndpointSlices", "EndpointWatch"]

log = logging.getLogger(__name__)

Slice = dict[str, Any]


def _identities(endpoint: dict[str, Any]) -> set[str]:
    """What names one endpoint: its pod's UID and its addresses."""
    found = {f"ip:{a}" for a in endpoint.get("addresses") or []}
    uid = (endpoint.get("targetRef") or {}).get("uid")
    return found | ({f"uid:{uid}"} if uid else set())


def _worker_identities(worker: WorkerInfo) -> set[str]:
    host = worker.base_url.split("//")[1].rsplit(":", 1)[0]
    return {f"ip:{host}"} | ({f"uid:{worker.uid}"} if worker.uid else set())


def _endpoints(endpoint_slice: Slice) -> dict[str, bool]:
    """Identity -> ready, of one slice (`ready` unset counts as ready, as kube-proxy reads it)."""
    found: dict[str, bool] = {}
    for endpoint in endpoint_slice.get("endpoints") or []:
        ready = (endpoint.get("conditions") or {}).get("ready") is not False
        for identity in _identities(endpoint):
            found[identity] = found.get(identity, False) or ready
    return found


class EndpointLapses:
    """The Service's endpoints as listed when the load started, and every endpoint that was
    ready and then was not (left the slices, or stayed in them not ready)."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, bool]] = {}
        self.at_start: set[str] | None = None
        self.lapses: dict[str, str] = {}
        """Identity -> its first lapse, in words."""

    def _ready(self) -> set[str]:
        return {i for endpoints in self.slices.values() for i, ok in endpoints.items() if ok}

    def _present(self) -> set[str]:
        return {i for endpoints in self.slices.values() for i in endpoints}

    def listed(self, slices: list[Slice], at: datetime) -> None:
        """A listing: the first one is the window's start; a later one (the watch expired)
        replaces every slice."""
        before = self._ready()
        self.slices = {s["metadata"]["name"]: _endpoints(s) for s in slices}
        if self.at_start is None:
            self.at_start = self._ready()
        else:
            self._lapsed(before, at)

    def event(self, kind: str, endpoint_slice: Slice, at: datetime) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of one slice."""
        before = self._ready()
        name = endpoint_slice["metadata"]["name"]
        if kind == "DELETED":
            self.slices.pop(name, None)
        else:
            self.slices[name] = _endpoints(endpoint_slice)
        self._lapsed(before, at)

    def _lapsed(self, before: set[str], at: datetime) -> None:
        present = self._present()
        for identity in before - self._ready():
            if identity not in self.lapses:
                how = "was not ready in" if identity in present else "left"
                self.lapses[identity] = f"{how} the Service's endpoints at {at:%H:%M:%S} UTC"

    def problems(self, workers: list[WorkerInfo]) -> dict[str, str]:
        """Worker name -> how its endpoint lapsed, for the workers whose did."""
        found = {}
        for worker in workers:
            identities = _worker_identities(worker)
            if not identities & (self.at_start or set()):
                found[worker.name] = "not among the Service's ready endpoints when the load started"
                continue
            lapse = next((self.lapses[i] for i in sorted(identities) if i in self.lapses), None)
            if lapse is not None:
                found[worker.name] = f"{lapse} (kube-proxy sent it no new connection meanwhile)"
        return found


class EndpointSlices:
    """One Service's EndpointSlices, listed and watched as raw JSON in the version the server
    serves (`discovery.k8s.io/v1` since Kubernetes 1.21, `v1beta1` before). Blocking."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, service: str) -> None:
        self.client = client
        self.namespace = namespace
        self.selector = f"kubernetes.io/service-name={service}"
        self.version: str | None = None

    def _get(self, version: str, query: list[tuple[str, str]], timeout: float | None = None):
        path = f"/apis/discovery.k8s.io/{version}/namespaces/{self.namespace}/endpointslices"
        method, url, headers, body, _ = self.client.param_serialize(
            "GET",
            path,
            query_params=[("labelSelector", self.selector), *query],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return self.client.call_api(method, url, headers, body, _request_timeout=timeout)

    def list(self) -> tuple[list[Slice], str]:
        """The slices and the resource version to watch from."""
        for version in [self.version] if self.version else ["v1", "v1beta1"]:
            response = self._get(version, [])
            data = response.read()
            if response.status == 404 and self.version is None:
                continue
            if response.status >= 400:
                raise ApiException(status=response.status, reason=response.reason)
            self.version = version
            document = json.loads(data)
            return document["items"], document["metadata"]["resourceVersion"]
        raise ApiException(status=404, reason="the server serves no EndpointSlices")

    def watch(self, since: str, seconds: int) -> Iterator[dict[str, Any]]:
        """Watch events after resource version `since`, for at most `seconds`."""
        assert self.version is not None, "list first"
        query = [("watch", "true"), ("resourceVersion", since), ("timeoutSeconds", str(seconds))]
        response = self._get(self.version, query, timeout=seconds + 10)
        try:
            if response.status >= 400:
                response.read()
                raise ApiException(status=response.status, reason=response.reason)
            for line in iter_resp_lines(response.response):
                if line:
                    yield json.loads(line)
        finally:
            response.response.release_conn()


class EndpointWatch:
    """Watches one Service's endpoints in a thread of its own, from `start` until `stop`
    (a thread, not a task: it must not wait on the event loop of every experiment)."""

    def __init__(self, slices: EndpointSlices) -> None:
        self.slices = slices
        self.seen = EndpointLapses()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> None:
        """List the endpoints as they are now (the window's start), then watch (blocking
        until listed)."""
        items, version = self.slices.list()
        self.seen.listed(items, datetime.now(UTC))
        threading.Thread(
            target=self._watch, args=(version,), name="endpoint-watch", daemon=True
        ).start()

    def stop(self) -> None:
        """The thread ends within one watch slice."""
        self._stop.set()

    def problems(self, workers: list[WorkerInfo]) -> dict[str, str]:
        with self._lock:
            return self.seen.problems(workers)

    def _watch(self, version: str | None) -> None:
        """Events into `seen`; a watch that expired lists again (what changed meanwhile is
        compared whole); a refusal ends the watch (the pods' Ready transitions remain)."""
        while not self._stop.is_set():
            try:
                if version is None:
                    items, version = self.slices.list()
                    with self._lock:
                        self.seen.listed(items, datetime.now(UTC))
                for event in self.slices.watch(version, WATCH_SLICE):
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise ApiException(status=status.get("code"), reason=status.get("reason"))
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        with self._lock:
                            self.seen.event(event["type"], event["object"], datetime.now(UTC))
                    if self._stop.is_set():
                        return
            except ApiException as err:
                if err.status in (401, 403):
                    log.warning("endpoints of %s not watched: %s", self.slices.selector, err)
                    return
                if err.status == 410:
                    version = None
                else:
                    log.warning("watching endpoints of %s: %s", self.slices.selector, err)
                    self._stop.wait(1.0)
            except (OSError, urllib3.exceptions.HTTPError, ValueError) as err:
                log.warning("watching endpoints of %s: %s", self.slices.selector, err)
                self._stop.wait(1.0)
