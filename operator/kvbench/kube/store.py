"""The results store on Kubernetes: one experiment's run states, records and aggregate in
ConfigMaps of its namespace, keyed by the experiment resource's UID and owned by it (deleting
the experiment deletes them).

    <name>-results        format, version, experiment.json (the resolved spec it started with)
    <name>-states-<k>     binaryData r<index>: gzip of the RunState JSON, runs 100k..100k+99
    <name>-records-<k>    binaryData r<index>: gzip of the RunRecord JSON, likewise
    <name>-aggregate      binaryData aggregate.json.gz: the medians over trials
    <prefix>-result-<i>   an attempt's result document (`kvbench.kube.results`), written by
                          its load generator Job, or by `save_raw` when the Job did not

All carry `app.kubernetes.io/managed-by: kvbench`, `kvbench.io/experiment: <name>`,
`kvbench.io/experiment-uid: <uid>` and `kvbench.io/component: results`; an attempt's result
ConfigMaps also `kvbench.io/run-index` and `kvbench.io/attempt` (as the Kubernetes back end
makes them, `kvbench.kube.manifests.load_objects`), which keeps them out of what `open` loads:
they are big, and read on demand (`read_raw`).

A run's record with 16 pods takes about 1.1 KB compressed, its state as much, so 100 runs to a
ConfigMap stay near 110 KB, far under the 1 MiB a ConfigMap holds (a write that would pass
`CONFIGMAP_BUDGET` is refused). Every write is a merge patch of the one key it changes: no
read-modify-write, so no write can undo another and a 409 (retried) cannot lose an update.
"""

import base64
import functools
import gzip
import json
import re
from typing import Any

from kubernetes.client import CoreV1Api, V1ConfigMap
from kubernetes.client.exceptions import ApiException

from kvbench.api import (
    AggregatePoint,
    BenchmarkExperiment,
    ResultsLocation,
    RunRecord,
    parse_experiment,
)
from kvbench.kube.manifests import (
    LABEL_ATTEMPT,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    LABEL_RUN,
    LABEL_UID,
    MANAGED_BY,
)
from kvbench.kube.results import (
    CONFIGMAP_BUDGET,
    ensure_result_configmaps,
    read_result_document,
    result_configmap_names,
    with_retries,
    write_result,
)
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.states import RunState
from kvbench.runner.stores.base import RunStore, StoreMismatch
from kvbench.runner.stores.directory import resolved_experiment, same_experiment

__all__ = ["ConfigMapFull", "ConfigMapStore"]

COMPONENT = "results"
RUNS_PER_CONFIGMAP = 100
FORMAT = "kvbench-results-configmaps"
FORMAT_VERSION = "1"
_RAW = "configmaps:"
_AGGREGATE_KEY = "aggregate.json.gz"


class ConfigMapFull(RuntimeError):
    """A write that would take one of the store's ConfigMaps past `CONFIGMAP_BUDGET`."""


def _pack(text: str) -> bytes:
    return gzip.compress(text.encode(), mtime=0)


def _unpack(value: str) -> bytes:
    return gzip.decompress(base64.b64decode(value))


class ConfigMapStore(RunStore):
    """One experiment's results in ConfigMaps. Calls are synchronous and each makes one or a
    few API calls (retried while the API server is briefly away)."""

    def __init__(
        self, api: CoreV1Api, namespace: str, experiment_name: str, uid: str, owner: dict[str, Any]
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = experiment_name
        self.uid = uid
        self.owner = owner
        self._shard = re.compile(rf"^{re.escape(experiment_name)}-(states|records)-(\d+)$")
        self._resolved: dict[str, Any] | None = None
        self._sizes: dict[str, dict[str, int]] = {}  # ConfigMap -> key -> bytes of key + value
        self._states: dict[int, RunState] = {}
        self._records: dict[int, RunRecord] = {}
        self._aggregate: list[AggregatePoint] = []

    @property
    def anchor(self) -> str:
        """The ConfigMap that says the store exists, which experiment and which format."""
        return f"{self.name}-results"

    def open(self, experiment: BenchmarkExperiment) -> None:
        if experiment.metadata.name != self.name:
            raise StoreMismatch(f"the store of {self.name} cannot hold {experiment.metadata.name}")
        resolved = resolved_experiment(experiment)
        self.load()
        if self._resolved is None:
            data = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "experiment.json": json.dumps(resolved, sort_keys=True),
            }
            self._check_identity(self._create(self.anchor, {"data": data}))
        if not same_experiment(self._resolved, resolved):
            raise StoreMismatch(
                f"ConfigMap {self.namespace}/{self.anchor} holds results of this experiment's "
                "spec as it was when its runs began, and the spec changed since; its results "
                "are never mixed with another spec's"
            )

    def load(self) -> None:
        """Read everything the store holds (also without opening it, e.g. to see the spec
        its results belong to); refuses ConfigMaps of another experiment of the same name."""
        selector = f"{LABEL_EXPERIMENT}={self.name},{LABEL_COMPONENT}={COMPONENT},!{LABEL_RUN}"
        found = with_retries(
            functools.partial(
                self.api.list_namespaced_config_map, self.namespace, label_selector=selector
            ),
            f"listing the results ConfigMaps of {self.namespace}/{self.name}",
        ).items
        self._resolved, self._sizes = None, {}
        self._states, self._records, self._aggregate = {}, {}, []
        for configmap in found:
            self._check_identity(configmap)
        for configmap in found:
            self._read(configmap)
        if found and self._resolved is None:
            raise StoreMismatch(
                f"{self.namespace} holds results ConfigMaps of {self.name} but no "
                f"{self.anchor}: the store is incomplete, delete its ConfigMaps to start over"
            )

    def _check_identity(self, configmap: V1ConfigMap) -> None:
        name = configmap.metadata.name
        uid = (configmap.metadata.labels or {}).get(LABEL_UID)
        if uid != self.uid:
            raise StoreMismatch(
                f"ConfigMap {self.namespace}/{name} belongs to another experiment (UID {uid}, "
                f"this {self.name} is {self.uid}): an older one of the same name, maybe still "
                "being deleted; results are never mixed"
            )
        if name != self.anchor:
            return
        data = configmap.data or {}
        if (data.get("format"), data.get("version")) != (FORMAT, FORMAT_VERSION):
            raise StoreMismatch(
                f"ConfigMap {self.namespace}/{name} is of format {data.get('format')} "
                f"{data.get('version')}; this kvbench reads {FORMAT} {FORMAT_VERSION}"
            )
        self._resolved = json.loads(data["experiment.json"])

    def _read(self, configmap: V1ConfigMap) -> None:
        name = configmap.metadata.name
        binary = configmap.binary_data or {}
        self._sizes[name] = {
            key: len(key) + len(value.encode()) for key, value in (configmap.data or {}).items()
        } | {key: len(key) + len(base64.b64decode(value)) for key, value in binary.items()}
        shard = self._shard.match(name)
        if shard and shard.group(1) == "states":
            for value in binary.values():
                state = RunState.model_validate_json(_unpack(value))
                self._states[state.index] = state
        elif shard:
            for value in binary.values():
                record = RunRecord.model_validate_json(_unpack(value))
                self._records[record.index] = record
        elif name == f"{self.name}-aggregate":
            points = json.loads(_unpack(binary[_AGGREGATE_KEY]))
            self._aggregate = [AggregatePoint.model_validate(p) for p in points]

    def _create(self, name: str, content: dict[str, Any]) -> V1ConfigMap:
        """Create one of the store's ConfigMaps; the existing one when it is already there."""
        metadata = {"name": name, "labels": self._labels(), "ownerReferences": [self.owner]}
        try:
            return with_retries(
                functools.partial(
                    self.api.create_namespaced_config_map,
                    self.namespace,
                    {"metadata": metadata, **content},
                ),
                f"creating ConfigMap {self.namespace}/{name}",
                conflicts="unless-exists",
            )
        except ApiException as err:
            if err.status != 409:
                raise
        return with_retries(
            functools.partial(self.api.read_namespaced_config_map, name, self.namespace),
            f"reading ConfigMap {self.namespace}/{name}",
        )

    def _put(self, name: str, key: str, value: bytes) -> None:
        """Set one key of one of the store's ConfigMaps, creating it on its first key."""
        sizes = self._sizes.get(name, {})
        total = sum(sizes.values()) - sizes.get(key, 0) + len(key) + len(value)
        if total > CONFIGMAP_BUDGET:
            raise ConfigMapFull(
                f"ConfigMap {self.namespace}/{name} would hold {total} bytes with {key}, over "
                f"the {CONFIGMAP_BUDGET} kvbench puts in one"
            )
        content = {"binaryData": {key: base64.b64encode(value).decode()}}
        try:
            with_retries(
                functools.partial(
                    self.api.patch_namespaced_config_map, name, self.namespace, content
                ),
                f"writing {key} to ConfigMap {self.namespace}/{name}",
            )
        except ApiException as err:
            if err.status != 404:
                raise
            created = self._create(name, content)
            self._check_identity(created)
            if (created.binary_data or {}).get(key) != content["binaryData"][key]:
                self._put(name, key, value)  # someone else created it meanwhile
                return
        self._sizes.setdefault(name, {})[key] = len(key) + len(value)

    def _labels(self, **extra: str) -> dict[str, str]:
        return {
            MANAGED_BY: "kvbench",
            LABEL_EXPERIMENT: self.name,
            LABEL_UID: self.uid,
            LABEL_COMPONENT: COMPONENT,
            **extra,
        }

    def _run_configmap(self, kind: str, index: int) -> str:
        return f"{self.name}-{kind}-{index // RUNS_PER_CONFIGMAP}"

    def stored_experiment(self) -> BenchmarkExperiment | None:
        """The experiment the store holds results of, read now (None when it holds none):
        the spec an experiment started with, also after its resource's spec changed."""
        self.load()
        return self.experiment() if self._resolved is not None else None

    def experiment(self) -> BenchmarkExperiment:
        if self._resolved is None:
            raise RuntimeError(f"the store of {self.name} is not loaded (or holds nothing)")
        return parse_experiment(self._resolved, f"ConfigMap {self.namespace}/{self.anchor}")

    def states(self) -> dict[int, RunState]:
        return dict(self._states)

    def save_state(self, state: RunState) -> None:
        self._put(
            self._run_configmap("states", state.index),
            f"r{state.index}",
            _pack(state.model_dump_json()),
        )
        self._states[state.index] = state

    def save_raw(self, names: ChildNames, document: bytes) -> str:
        """Where the attempt's Job wrote `document`; written there now when it did not."""
        configmaps = result_configmap_names(names.prefix)
        if read_result_document(self.api, self.namespace, configmaps) != document:
            attempt = {LABEL_RUN: str(names.index), LABEL_ATTEMPT: str(names.attempt)}
            ensure_result_configmaps(
                self.api, self.namespace, configmaps, self._labels(**attempt), self.owner
            )
            write_result(self.api, self.namespace, configmaps, document, patience=60.0)
        return f"{_RAW}{names.prefix}-result"

    def read_raw(self, where: str) -> bytes:
        if not where.startswith(_RAW) or not where.endswith("-result"):
            raise ValueError(f"not a result document in ConfigMaps: {where}")
        prefix = where.removeprefix(_RAW).removesuffix("-result")
        document = read_result_document(self.api, self.namespace, result_configmap_names(prefix))
        if document is None:
            raise FileNotFoundError(f"{self.namespace}/{prefix}-result-*: no complete document")
        return document

    def save_run(self, record: RunRecord) -> None:
        self._put(
            self._run_configmap("records", record.index),
            f"r{record.index}",
            _pack(record.model_dump_json(by_alias=True, exclude_none=True)),
        )
        self._records[record.index] = record

    def records(self) -> list[RunRecord]:
        return [self._records[i] for i in sorted(self._records)]

    def save_aggregate(self, points: list[AggregatePoint]) -> None:
        document = json.dumps([p.to_k8s() for p in points])
        self._put(f"{self.name}-aggregate", _AGGREGATE_KEY, _pack(document))
        self._aggregate = list(points)

    def aggregate(self) -> list[AggregatePoint]:
        return list(self._aggregate)

    def location(self) -> ResultsLocation:
        return ResultsLocation(kind="configmaps", location=f"{self.namespace}/{self.name}-*")
