"""An attempt's load generator result in ConfigMaps, written by the Job itself the moment the
load ends: the result then outlives the pod and does not need the operator to be running
(stopped, restarting) to be kept.

The operator creates the attempt's ConfigMaps `<prefix>-result-<i>` (`result_configmap_names`)
empty before the Job, owned by the experiment, and a Role that lets the Job's service account
`get, update, patch` exactly those names (`resourceNames`) and no other object; writing needs
`patch` only. `kvbench loadgen --out-configmaps NS/NAME0,NAME1,...` writes there.

The document (gzip, 1.1-1.6 MiB for 10,000 requests) is split in chunks of `CHUNK_BYTES`,
since a ConfigMap holds at most 1 MiB. Chunk i goes into names[i] as

    binaryData: {result.gz.part: <chunk>}
    data: {chunks: <n>, index: <i>, sha256: <of the whole document>}

A reader sees the whole document or knows it is incomplete: names[0], where a reader starts,
is written last, and every chunk carries the digest of the document it belongs to, so a
reader during a rewrite (a retried pod) finds chunks of two documents and gets None, never a
mixture. Every call retries with back-off while the API server answers 409, 429, 5xx or
not at all (`with_retries`).
"""

import base64
import functools
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import kubernetes
import urllib3
from kubernetes.client import CoreV1Api, V1ConfigMap
from kubernetes.client.exceptions import ApiException

from kvbench.kube.objects import status_reason

__all__ = [
    "CHUNK_BYTES",
    "CLAIM",
    "CONFIGMAP_BUDGET",
    "PART_KEY",
    "ResultConfigMapError",
    "claim_attempt",
    "ensure_result_configmaps",
    "in_cluster_api",
    "read_result_document",
    "result_configmap_names",
    "with_retries",
    "write_result",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

CONFIGMAP_BUDGET = 900 * 1024
"""Bytes of keys and values kvbench puts in one ConfigMap (the API server refuses 1 MiB)."""
CHUNK_BYTES = CONFIGMAP_BUDGET - 1024
"""One chunk of a result document, leaving room for the keys and the chunk's marks."""
PART_KEY = "result.gz.part"
_CONNECTION_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError)


class ResultConfigMapError(RuntimeError):
    """A result document that does not fit its ConfigMaps, or chunks that contradict it."""


def with_retries(
    call: Callable[[], T],
    what: str,
    patience: float = 60.0,
    conflicts: bool | Literal["unless-exists"] = True,
) -> T:
    """`call()`, again after a growing pause while the API server answers 429, 5xx or not at
    all, for up to `patience` seconds: a control plane restart must not lose a run's result.
    A 409 is retried too (a concurrent write, a busy server) unless `conflicts` is False (the
    caller reads it: an optimistic lock lost), or is "unless-exists" and the object exists
    (a create's AlreadyExists, which the caller takes as done)."""
    deadline = time.monotonic() + patience
    delay = 0.25
    while True:
        try:
            return call()
        except ApiException as err:
            status = err.status or 0
            exists = status == 409 and status_reason(err) == "AlreadyExists"
            retried_409 = conflicts is True or (conflicts == "unless-exists" and not exists)
            transient = status >= 500 or status == 429 or (status == 409 and retried_409)
            if not transient or time.monotonic() + delay > deadline:
                raise
            reason = f"HTTP {status} {err.reason}"
        except _CONNECTION_ERRORS as err:
            if time.monotonic() + delay > deadline:
                raise
            reason = f"{type(err).__name__}: {err}"
        log.warning("%s: %s; again in %.2f s", what, reason, delay)
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


def result_configmap_names(prefix: str, chunks: int = 4) -> list[str]:
    """The ConfigMaps of one attempt's result (`ChildNames.prefix`); 4 hold 3.5 MiB."""
    return [f"{prefix}-result-{i}" for i in range(chunks)]


def ensure_result_configmaps(
    api: CoreV1Api,
    namespace: str,
    names: list[str],
    labels: dict[str, str],
    owner: dict[str, Any],
) -> None:
    """Create the empty ConfigMaps a result is written into (a Role cannot allow `create` of
    given names only, so the writer cannot create them itself); existing ones are kept."""
    for name in names:
        body = {"metadata": {"name": name, "labels": labels, "ownerReferences": [owner]}}
        try:
            with_retries(
                functools.partial(api.create_namespaced_config_map, namespace, body),
                f"creating ConfigMap {namespace}/{name}",
                conflicts="unless-exists",
            )
        except ApiException as err:
            if err.status != 409:
                raise


CLAIM = "kvbench.io/claimed-by"


def claim_attempt(api: CoreV1Api, namespace: str, names: list[str], claimant: str) -> None:
    """Mark the attempt's results as this pod's before it sends anything. A second pod of
    the same Job (the first was lost mid-run) finds another's claim and must not measure
    again: the workers already served part of a load, so its window would not be fresh."""
    while True:
        found = with_retries(
            functools.partial(api.read_namespaced_config_map, names[0], namespace),
            f"reading {namespace}/{names[0]}",
        )
        holder = (found.metadata.annotations or {}).get(CLAIM)
        if holder == claimant:
            return
        if holder is not None:
            raise ResultConfigMapError(
                f"{namespace}/{names[0]} is claimed by load generator pod {holder}: this "
                "attempt's load already ran on these workers, a second one would not measure "
                "fresh servers"
            )
        body = {
            "metadata": {
                "annotations": {CLAIM: claimant},
                "resourceVersion": found.metadata.resource_version,
            }
        }
        try:
            with_retries(
                functools.partial(api.patch_namespaced_config_map, names[0], namespace, body),
                f"claiming {namespace}/{names[0]}",
                conflicts=False,  # a 409 here is another writer: read the claim again
            )
            return
        except ApiException as err:
            if err.status != 409:
                raise


def write_result(
    api: CoreV1Api, namespace: str, names: list[str], document: bytes, patience: float = 300.0
) -> None:
    """Write `document` over `names` (created beforehand), names[0] last."""
    parts = [document[i : i + CHUNK_BYTES] for i in range(0, len(document), CHUNK_BYTES)]
    parts = parts or [b""]
    if len(parts) > len(names):
        raise ResultConfigMapError(
            f"the result document ({len(document)} bytes) needs {len(parts)} ConfigMaps of "
            f"{CHUNK_BYTES} bytes, only {len(names)} were given ({names[0]}...)"
        )
    digest = hashlib.sha256(document).hexdigest()
    for index in [*range(1, len(parts)), 0]:
        body = {
            "data": {"chunks": str(len(parts)), "index": str(index), "sha256": digest},
            "binaryData": {PART_KEY: base64.b64encode(parts[index]).decode()},
        }
        with_retries(
            functools.partial(api.patch_namespaced_config_map, names[index], namespace, body),
            f"writing result chunk {index + 1}/{len(parts)} to {namespace}/{names[index]}",
            patience,
        )


def read_result_document(
    api: CoreV1Api, namespace: str, names: list[str], patience: float = 60.0
) -> bytes | None:
    """The document in `names`, byte for byte; None while it is incomplete (not written yet,
    being written or rewritten, or the ConfigMaps not created yet)."""
    first = _get(api, namespace, names[0], patience)
    marks = (first.data or {}) if first else {}
    if "chunks" not in marks:
        return None
    count, digest = int(marks["chunks"]), marks["sha256"]
    if count > len(names):
        raise ResultConfigMapError(
            f"{namespace}/{names[0]} says {count} chunks, more than the {len(names)} names given"
        )
    parts = []
    for index, name in enumerate(names[:count]):
        chunk = first if index == 0 else _get(api, namespace, name, patience)
        data = (chunk.data or {}) if chunk else {}
        if chunk is None or data.get("sha256") != digest or data.get("index") != str(index):
            return None
        parts.append(base64.b64decode((chunk.binary_data or {}).get(PART_KEY, "")))
    document = b"".join(parts)
    if hashlib.sha256(document).hexdigest() != digest:
        raise ResultConfigMapError(
            f"the chunks in {namespace}/{names[0]}... agree on sha256 {digest}, their bytes "
            "do not have it: the result is corrupt"
        )
    return document


def _get(api: CoreV1Api, namespace: str, name: str, patience: float) -> V1ConfigMap | None:
    try:
        return with_retries(
            functools.partial(api.read_namespaced_config_map, name, namespace),
            f"reading ConfigMap {namespace}/{name}",
            patience,
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def in_cluster_api() -> CoreV1Api:
    """The pod's service account; outside a pod (tests, a workstation) the kubeconfig."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return CoreV1Api()
