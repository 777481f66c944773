"""The results directory: the resolved spec, one JSON per run, the aggregate; the checkpoint.

Layout:
    experiment.yaml      the experiment as validated (with defaults), fixed for the directory
    runs/<id>.json       one RunRecord per finished run (written atomically: the checkpoint)
    raw/<id>.json        the load generator's full result document of that run
    aggregate.json       medians over trials, rewritten after every run

A run is done when its `runs/<id>.json` exists; resuming skips it, so no run is recorded twice.
"""

import json
import os
from pathlib import Path

import yaml

from kvbench.api import AggregatePoint, BenchmarkExperiment, RunRecord, parse_experiment

__all__ = ["ResultsStore", "StoreMismatch"]


class StoreMismatch(RuntimeError):
    """The directory holds results of a different experiment."""


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


class ResultsStore:
    """Reads and writes one experiment's results directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def spec_file(self) -> Path:
        return self.root / "experiment.yaml"

    def run_file(self, run_id: str) -> Path:
        return self.root / "runs" / f"{run_id}.json"

    def raw_file(self, run_id: str) -> Path:
        return self.root / "raw" / f"{run_id}.json"

    def open(self, experiment: BenchmarkExperiment) -> None:
        """Start a new directory, or resume one that holds the same experiment."""
        resolved = {
            "apiVersion": experiment.api_version,
            "kind": experiment.kind,
            "metadata": {"name": experiment.metadata.name},
            "spec": experiment.spec.to_k8s(),
        }
        if self.spec_file.exists():
            stored = yaml.safe_load(self.spec_file.read_text())
            if stored != resolved:
                raise StoreMismatch(
                    f"{self.root} holds results of another experiment (its experiment.yaml "
                    "differs); choose another --out directory"
                )
            return
        _write_atomically(self.spec_file, yaml.safe_dump(resolved, sort_keys=False))

    def experiment(self) -> BenchmarkExperiment:
        """The experiment this directory holds."""
        return parse_experiment(yaml.safe_load(self.spec_file.read_text()), str(self.spec_file))

    def done(self) -> set[str]:
        """Ids of the runs already recorded."""
        return {p.stem for p in (self.root / "runs").glob("*.json")}

    def save_raw(self, run_id: str, document: str) -> Path:
        path = self.raw_file(run_id)
        _write_atomically(path, document)
        return path

    def save_run(self, record: RunRecord) -> None:
        """Record a finished run; this is the checkpoint, written last."""
        _write_atomically(self.run_file(record.id), record.model_dump_json(indent=2))

    def records(self) -> list[RunRecord]:
        """Every recorded run, in plan order."""
        records = [
            RunRecord.model_validate_json(p.read_text())
            for p in (self.root / "runs").glob("*.json")
        ]
        return sorted(records, key=lambda r: r.index)

    def save_aggregate(self, points: list[AggregatePoint]) -> None:
        document = [p.model_dump(mode="json") for p in points]
        _write_atomically(self.root / "aggregate.json", json.dumps(document, indent=2))

    def aggregate(self) -> list[AggregatePoint]:
        path = self.root / "aggregate.json"
        if not path.exists():
            return []
        return [AggregatePoint.model_validate(p) for p in json.loads(path.read_text())]
