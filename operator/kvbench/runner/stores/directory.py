"""The results directory: the store `kvbench run` writes and `kvbench report` reads.

Layout (format 2):
    format.json           {"format": "kvbench-results", "version": 2}
    experiment.yaml       the experiment as validated (with defaults), fixed for the directory
    state/r<index>.json   each run's state, rewritten before every step (the checkpoint)
    runs/r<index>.json    each run's RunRecord (figures, or why it failed for good)
    raw/<attempt>.json.gz the load generator's result document of each collected attempt
    aggregate.json        medians over trials, rewritten after every run
    status.json           the status the resource would show
    events.jsonl          every state written, in order (a run's history; never rewritten)

Files are replaced atomically, so a crash leaves the old or the new version, never half.
"""

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import yaml

from kvbench.api import (
    REPRODUCES,
    AggregatePoint,
    BenchmarkExperiment,
    ExperimentStatus,
    ResultsLocation,
    RunRecord,
    parse_experiment,
)
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.states import RunState
from kvbench.runner.stores.base import RunStore, StoreMismatch

__all__ = ["FORMAT_VERSION", "DirectoryStore", "resolved_experiment", "same_experiment"]

FORMAT_VERSION = 2
_FORMAT = {"format": "kvbench-results", "version": FORMAT_VERSION}


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def resolved_experiment(experiment: BenchmarkExperiment) -> dict:
    """The experiment as a store keeps it: the spec with every default filled in, and the
    published measurement it reproduces, which the report reads back."""
    metadata: dict = {"name": experiment.metadata.name}
    reproduces = experiment.metadata.annotations.get(REPRODUCES)
    if reproduces is not None:
        metadata["annotations"] = {REPRODUCES: reproduces}
    return {
        "apiVersion": experiment.api_version,
        "kind": experiment.kind,
        "metadata": metadata,
        "spec": experiment.spec.to_k8s(),
    }


def same_experiment(stored: dict, resolved: dict) -> bool:
    """Whether a store's experiment is this one: its name and resolved spec. An annotation
    added or changed later changes what the report prints, not what was measured."""
    return all(stored.get(k) == resolved.get(k) for k in ("apiVersion", "kind", "spec")) and (
        stored.get("metadata", {}).get("name") == resolved["metadata"]["name"]
    )


class DirectoryStore(RunStore):
    """One experiment's results directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._states: dict[int, RunState] = {}
        self._records: dict[int, RunRecord] = {}
        self._aggregate: list[AggregatePoint] = []

    @property
    def spec_file(self) -> Path:
        return self.root / "experiment.yaml"

    def is_results_directory(self) -> bool:
        return self.spec_file.exists()

    def open(self, experiment: BenchmarkExperiment) -> None:
        resolved = resolved_experiment(experiment)
        if self.spec_file.exists():
            self._check_format()
            if not same_experiment(yaml.safe_load(self.spec_file.read_text()), resolved):
                raise StoreMismatch(
                    f"{self.root} holds results of another experiment (its experiment.yaml "
                    "differs); choose another --out directory"
                )
        else:
            _write_atomically(self.root / "format.json", json.dumps(_FORMAT).encode())
            _write_atomically(self.spec_file, yaml.safe_dump(resolved, sort_keys=False).encode())
        self.load()

    def _check_format(self) -> None:
        path = self.root / "format.json"
        found = json.loads(path.read_text()) if path.exists() else {"version": 1}
        if found.get("version") != FORMAT_VERSION:
            raise StoreMismatch(
                f"{self.root} is a results directory of format {found.get('version')} (an "
                f"older kvbench); this kvbench reads format {FORMAT_VERSION}: run the "
                "experiment again into a new --out directory"
            )

    def load(self) -> None:
        """Read what the directory holds (for reports, without opening it for a run)."""
        self._check_format()
        self._states = {
            s.index: s
            for s in (RunState.model_validate_json(p.read_bytes()) for p in self._files("state"))
        }
        self._records = {
            r.index: r
            for r in (RunRecord.model_validate_json(p.read_bytes()) for p in self._files("runs"))
        }
        path = self.root / "aggregate.json"
        self._aggregate = (
            [AggregatePoint.model_validate(p) for p in json.loads(path.read_text())]
            if path.exists()
            else []
        )

    def _files(self, folder: str) -> list[Path]:
        return sorted((self.root / folder).glob("r*.json"))

    def experiment(self) -> BenchmarkExperiment:
        return parse_experiment(yaml.safe_load(self.spec_file.read_text()), str(self.spec_file))

    def states(self) -> dict[int, RunState]:
        return dict(self._states)

    def save_state(self, state: RunState) -> None:
        _write_atomically(
            self.root / "state" / f"r{state.index}.json", state.model_dump_json(indent=1).encode()
        )
        self._states[state.index] = state
        event = {
            "time": datetime.now(UTC).isoformat(),
            "index": state.index,
            "id": state.id,
            "attempt": state.attempt,
            "stage": state.stage.value,
        }
        with (self.root / "events.jsonl").open("a") as journal:
            journal.write(json.dumps(event) + "\n")

    def save_raw(self, names: ChildNames, document: bytes) -> str:
        where = f"raw/r{names.index}-a{names.attempt}.json.gz"
        _write_atomically(self.root / where, document)
        return where

    def read_raw(self, where: str) -> bytes:
        return (self.root / where).read_bytes()

    def save_run(self, record: RunRecord) -> None:
        _write_atomically(
            self.root / "runs" / f"r{record.index}.json",
            record.model_dump_json(by_alias=True, exclude_none=True, indent=1).encode(),
        )
        self._records[record.index] = record

    def records(self) -> list[RunRecord]:
        return [self._records[i] for i in sorted(self._records)]

    def save_aggregate(self, points: list[AggregatePoint]) -> None:
        document = [p.to_k8s() for p in points]
        _write_atomically(self.root / "aggregate.json", json.dumps(document, indent=1).encode())
        self._aggregate = list(points)

    def aggregate(self) -> list[AggregatePoint]:
        return list(self._aggregate)

    def save_status(self, status: ExperimentStatus) -> None:
        """The status the resource would show, for a user watching a local run."""
        _write_atomically(
            self.root / "status.json",
            json.dumps(status.to_k8s(), indent=1).encode(),
        )

    def location(self) -> ResultsLocation:
        return ResultsLocation(kind="directory", location=str(self.root))
