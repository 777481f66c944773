"""Experiments outside the operator's namespaces, told so.

Given a namespace list (the chart's default: the release's own namespace), kopf serves only
experiments there, and one applied elsewhere would get nothing at all: no phase, no condition,
no Event, nothing to say why. So the operator also reads experiments cluster-wide (list and
watch, nothing more) and, on one outside its namespaces that no operator has taken up, writes
one condition (Ready=False, reason NotWatched, naming its namespace, what it watches and how to
change that) and one Event. Only once: an experiment that already says NotWatched (this
operator or another said it) or has a phase (another operator runs it) is left alone, so two
operators watching different namespaces never write over each other.
"""

import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from kvbench.api import GROUP, PLURAL, VERSION, Condition
from kvbench.operator.status import ResourceStatus

__all__ = ["NOT_WATCHED", "NotWatchedReporter", "needs_notice", "not_watched_message"]

log = logging.getLogger(__name__)

NOT_WATCHED = "NotWatched"
_WATCH_SECONDS = 60
_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace() -> str | None:
    """The namespace the operator's pod runs in (its service account's), outside a pod none."""
    try:
        return _ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


def not_watched_message(namespace: str, watched: Iterable[str], runs_in: str | None) -> str:
    """Why nothing happens, and the two ways to change it."""
    who = "the kvbench operator" + (f" in namespace {runs_in}" if runs_in else "")
    scope = ", ".join(sorted(watched))
    return (
        f"not run: {who} watches only namespace(s) {scope}, not {namespace}. Apply the "
        f"experiment in a watched namespace, or add {namespace} to the chart's "
        "watch.namespaces (or set watch.allNamespaces=true) and upgrade the release "
        "(docs/operator.md, 'Which namespaces')"
    )


def needs_notice(body: dict[str, Any], watched: frozenset[str]) -> bool:
    """Whether `body` is outside `watched` and no operator has said anything on it yet."""
    meta = body.get("metadata") or {}
    if meta.get("namespace") in watched or meta.get("deletionTimestamp"):
        return False
    status = body.get("status") or {}
    if status.get("phase"):
        return False
    return not any(c.get("reason") == NOT_WATCHED for c in status.get("conditions") or [])


class NotWatchedReporter:
    """Watches experiments in every namespace from a thread of its own, and tells those
    outside `watched` that they are not run."""

    def __init__(
        self, client: kubernetes.client.ApiClient, watched: Iterable[str], runs_in: str | None
    ) -> None:
        self.client = client
        self.watched = frozenset(watched)
        self.runs_in = runs_in
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self.run, name="not-watched", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def consider(self, body: dict[str, Any]) -> None:
        if not needs_notice(body, self.watched):
            return
        meta = body["metadata"]
        status = ResourceStatus(self.client, meta["namespace"], meta["name"], meta["uid"])
        stored = (body.get("status") or {}).get("conditions") or []
        try:
            status.conditions = [Condition.model_validate(c) for c in stored]
        except ValidationError:
            status.conditions = []  # conditions another version wrote: only ours then
        message = not_watched_message(meta["namespace"], self.watched, self.runs_in)
        status.not_watched(NOT_WATCHED, message)

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        listed = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return listed["items"], listed["metadata"]["resourceVersion"]

    def _events(self, since: str) -> Iterator[dict[str, Any]]:
        return kubernetes.watch.Watch().stream(
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            resource_version=since,
            timeout_seconds=_WATCH_SECONDS,
        )

    def run(self) -> None:
        """Until stopped: every experiment listed, then each one added or changed; a watch
        that expired lists again; refused (RBAC without the cluster-wide read) it gives up."""
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    items, version = self._list()
                    for body in items:
                        self.consider(body)
                for event in self._events(version):
                    body = event["object"]
                    version = body["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.consider(body)
                    if self._stop.is_set():
                        return
            except ApiException as err:
                if err.status in (401, 403):
                    log.warning("experiments outside %s not watched: %s", sorted(self.watched), err)
                    return
                if err.status != 410:  # 404: no CRD yet
                    log.warning("watching experiments cluster-wide: %s", err)
                    self._stop.wait(5.0)
                version = None
            except (OSError, urllib3.exceptions.HTTPError, ValueError) as err:
                log.warning("watching experiments cluster-wide: %s", err)
                self._stop.wait(5.0)
