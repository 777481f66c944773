"""A trace on a cluster: its ConfigMap (chunked, at most 1 MiB, said with the size when it
does not fit), the operator's read of it (the bytes the Job's mount gives), and the Job that
mounts it where the load generator reads it."""

import base64
import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner
from kubernetes.client.exceptions import ApiException

from kvbench.api import parse_experiment
from kvbench.api.workload import TraceWorkload
from kvbench.cli import main
from kvbench.kube.manifests import ExperimentRef, load_job
from kvbench.kube.trace import CHUNK_BYTES, MAX_CONFIGMAP_BYTES, configmap_trace, trace_configmap
from kvbench.kube.validation import validate_manifest
from kvbench.loadgen.workload.mooncake import TraceError
from kvbench.loadgen.workload.trace_source import TRACE_MOUNT, join_keys
from kvbench.runner.cluster import ChildNames

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "examples" / "traces" / "small-mooncake.jsonl"
SPEC = TraceWorkload(config_map={"name": "small-mooncake"})


def _values(manifest: dict) -> dict[str, bytes]:
    return {key: value.encode() for key, value in manifest["data"].items()}


def test_a_trace_becomes_chunks_of_whole_lines_joined_back_in_order() -> None:
    line = b'{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [0]}\n'
    data = line * (3 * (CHUNK_BYTES // len(line)) + 1)  # three full chunks and one line
    manifest = trace_configmap(data, "t", "bench")
    assert validate_manifest(manifest) == []
    assert list(manifest["data"]) == ["chunk-000", "chunk-001", "chunk-002", "chunk-003"]
    assert all(v.endswith("\n") and len(v) <= CHUNK_BYTES for v in manifest["data"].values())
    assert join_keys(_values(manifest)) == data
    assert manifest["metadata"] == {"name": "t", "namespace": "bench"}


def test_a_trace_above_one_mib_is_refused_with_its_size() -> None:
    with pytest.raises(TraceError, match="the trace is 1,048,577 bytes: a ConfigMap holds at"):
        trace_configmap(b"x" * (MAX_CONFIGMAP_BYTES + 1), "t")
    trace_configmap(b"x" * MAX_CONFIGMAP_BYTES, "t")  # exactly the limit fits


def test_the_cli_prints_the_configmap_or_the_reason(tmp_path: Path) -> None:
    printed = CliRunner().invoke(main, ["trace", "configmap", str(TRACE), "--name", "t"])
    assert printed.exit_code == 0, printed.output
    manifest = yaml.safe_load(printed.output)
    assert join_keys(_values(manifest)) == TRACE.read_bytes()
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (MAX_CONFIGMAP_BYTES + 10))
    refused = CliRunner().invoke(main, ["trace", "configmap", str(big), "--name", "t"])
    assert refused.exit_code == 1 and "1,048,586 bytes" in refused.output


class _Core:
    """The one call `configmap_trace` makes of the API."""

    def __init__(self, found: object | None) -> None:
        self.found = found

    def read_namespaced_config_map(self, name: str, namespace: str) -> object:
        if self.found is None:
            raise ApiException(status=404, reason="Not Found")
        return self.found


def test_the_operator_reads_the_bytes_the_job_mounts() -> None:
    manifest = trace_configmap(TRACE.read_bytes(), "small-mooncake")
    data = dict(manifest["data"])
    last = sorted(data)[-1]
    binary = {last: base64.b64encode(data.pop(last).encode()).decode()}
    found = SimpleNamespace(data=data, binary_data=binary)
    trace = configmap_trace(_Core(found), "bench", SPEC)
    assert trace.source == "ConfigMap small-mooncake" and len(trace.rows) == 200
    assert trace.sha256 == hashlib.sha256(TRACE.read_bytes()).hexdigest()


def test_the_operator_refuses_what_it_cannot_replay_naming_the_field() -> None:
    with pytest.raises(TraceError, match="configMap: ConfigMap bench/small-mooncake does not"):
        configmap_trace(_Core(None), "bench", SPEC)
    empty = SimpleNamespace(data=None, binary_data=None)
    with pytest.raises(TraceError, match="is empty"):
        configmap_trace(_Core(empty), "bench", SPEC)
    with pytest.raises(TraceError, match=r"spec.workload.trace.file: a path on the machine"):
        configmap_trace(_Core(empty), "bench", TraceWorkload(file="t.jsonl"))
    bad = SimpleNamespace(data={"chunk-000": '{"timestamp": 0}\n'}, binary_data=None)
    with pytest.raises(TraceError, match="ConfigMap small-mooncake line 1: input_length"):
        configmap_trace(_Core(bad), "bench", SPEC)


def test_the_job_mounts_the_trace_configmap_read_only() -> None:
    document = yaml.safe_load((ROOT / "examples" / "trace-replay.yaml").read_text())
    document["spec"]["workload"]["trace"] = {"configMap": {"name": "small-mooncake"}}
    spec = parse_experiment(document).spec
    ref = ExperimentRef(name="trace-replay", namespace="bench", uid="u")
    job = load_job(ref, spec, ChildNames(experiment="trace-replay", index=0, attempt=1), ["r"])
    assert validate_manifest(job) == []
    pod = job["spec"]["template"]["spec"]
    assert {"name": "trace", "configMap": {"name": "small-mooncake"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "trace", "mountPath": TRACE_MOUNT, "readOnly": True} in mounts
    local = parse_experiment(yaml.safe_load((ROOT / "examples" / "trace-replay.yaml").read_text()))
    without = load_job(ref, local.spec, ChildNames(experiment="t", index=0, attempt=1), ["r"])
    assert all(v["name"] != "trace" for v in without["spec"]["template"]["spec"]["volumes"])
