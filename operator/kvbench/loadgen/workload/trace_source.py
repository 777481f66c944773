"""Where a trace's bytes come from: a file (`kvbench run`), or a ConfigMap whose keys are
joined in name order, by the load generator's Job that mounts it at `TRACE_MOUNT` and by the
operator that reads it through the API alike, so both hash the same bytes."""

from collections.abc import Mapping
from pathlib import Path

from kvbench.api.workload import TraceInfo, TraceWorkload
from kvbench.loadgen.workload.mooncake import Trace, TraceError, parse_trace

__all__ = ["TRACE_MOUNT", "join_keys", "load_trace", "read_trace_bytes", "replayed_trace"]

TRACE_MOUNT = "/trace"
"""Where the load generator's Job mounts a `trace.configMap`."""


def join_keys(values: Mapping[str, bytes]) -> bytes:
    """A ConfigMap's trace: its keys' values in name order (`chunk-000`, `chunk-001`, ...)."""
    return b"".join(values[key] for key in sorted(values))


def read_trace_bytes(path: Path) -> bytes:
    """A trace file, or a mounted ConfigMap (a directory: one file per key, beside the
    kubelet's hidden `..data` links)."""
    try:
        if not path.is_dir():
            return path.read_bytes()
        keys = {p.name: p.read_bytes() for p in path.iterdir() if not p.name.startswith(".")}
    except OSError as err:
        raise TraceError(f"cannot read the trace {path}: {err.strerror or err}") from None
    if not keys:
        raise TraceError(f"the trace ConfigMap mounted at {path} has no keys")
    return join_keys(keys)


def load_trace(spec: TraceWorkload, path: Path) -> Trace:
    """The trace at `path` (a file or a mounted ConfigMap), parsed as `spec` says."""
    return parse_trace(read_trace_bytes(path), spec, spec.source)


def replayed_trace(spec: TraceWorkload, expected: TraceInfo) -> Trace:
    """The load generator's trace: `trace.file`, or the ConfigMap its Job mounts, checked to
    be the trace the experiment was planned with (a file or ConfigMap edited since is
    refused, not replayed as another workload under the same name)."""
    trace = load_trace(spec, Path(spec.file) if spec.file is not None else Path(TRACE_MOUNT))
    if trace.sha256 != expected.sha256:
        raise TraceError(
            f"{spec.source} has sha256 {trace.sha256}, but the experiment was planned with "
            f"{expected.sha256}: the trace changed after the experiment started"
        )
    return trace
