"""A trace on a cluster: the ConfigMap that holds it (`kvbench trace configmap` writes one,
size-checked) and the operator's read of it, which the experiment is planned from.

A ConfigMap holds at most 1 MiB of data (the API server refuses more: `MAX_CONFIGMAP_BYTES`),
so a trace must fit in that; it is written as keys `chunk-000`, `chunk-001`, ... of whole
lines, which the load generator's Job mounts and the operator reads joined in name order
(`trace_source.join_keys`), so both hash the same bytes.
"""

import base64
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvbench.api.workload import TraceWorkload
from kvbench.loadgen.workload.mooncake import Trace, TraceError, parse_trace
from kvbench.loadgen.workload.trace_source import join_keys

__all__ = ["CHUNK_BYTES", "MAX_CONFIGMAP_BYTES", "configmap_trace", "trace_configmap"]

MAX_CONFIGMAP_BYTES = 1 << 20
"""The API server's limit on a ConfigMap's data (its values' bytes, all keys together)."""
CHUNK_BYTES = 256 << 10
"""Most bytes of one key: whole lines, so every value reads as a piece of the trace."""


def _chunks(data: bytes) -> list[bytes]:
    """Whole lines, at most `CHUNK_BYTES` each (a longer line is a chunk of its own)."""
    chunks: list[list[bytes]] = []
    size = 0
    for line in data.splitlines(keepends=True):
        if chunks and size + len(line) <= CHUNK_BYTES:
            chunks[-1].append(line)
            size += len(line)
        else:
            chunks.append([line])
            size = len(line)
    return [b"".join(lines) for lines in chunks]


def trace_configmap(data: bytes, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The ConfigMap of a trace file's bytes, or a `TraceError` saying why it cannot be one."""
    if len(data) > MAX_CONFIGMAP_BYTES:
        raise TraceError(
            f"the trace is {len(data):,} bytes: a ConfigMap holds at most "
            f"{MAX_CONFIGMAP_BYTES:,} (1 MiB); replay fewer rows (cut the file) or run it "
            "locally with kvbench run"
        )
    try:
        values = {f"chunk-{i:03d}": c.decode() for i, c in enumerate(_chunks(data))}
    except UnicodeDecodeError as err:
        raise TraceError(f"the trace is not UTF-8 text (byte {err.start})") from None
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": values}


def configmap_trace(core: Any, namespace: str, spec: TraceWorkload) -> Trace:
    """The trace of `spec.configMap`, read through the API (blocking), as the Job will read
    it; a `TraceError` naming the field when there is none to read."""
    if spec.config_map is None:
        raise TraceError(
            "spec.workload.trace.file: a path on the machine of `kvbench run`; on a cluster "
            "put the trace in a ConfigMap (`kvbench trace configmap FILE --name NAME`) and "
            "name it in trace.configMap"
        )
    name = spec.config_map.name
    try:
        found = core.read_namespaced_config_map(name, namespace)
    except ApiException as err:
        what = "does not exist" if err.status == 404 else f"cannot be read ({err.reason})"
        raise TraceError(
            f"spec.workload.trace.configMap: ConfigMap {namespace}/{name} {what}"
        ) from None
    values = {key: value.encode() for key, value in (found.data or {}).items()}
    values |= {key: base64.b64decode(value) for key, value in (found.binary_data or {}).items()}
    if not values:
        raise TraceError(f"spec.workload.trace.configMap: ConfigMap {namespace}/{name} is empty")
    return parse_trace(join_keys(values), spec, spec.source)
