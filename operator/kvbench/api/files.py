"""Reading a BenchmarkExperiment from YAML, with errors that name the field in the file's terms."""

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvbench.api.experiment import BenchmarkExperiment

__all__ = ["SpecError", "format_errors", "load_experiment", "parse_experiment"]


class SpecError(ValueError):
    """An experiment file that cannot be used; `problems` lists `path: message` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid BenchmarkExperiment\n  " + "\n  ".join(problems))


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(document)"


def format_errors(err: ValidationError) -> list[str]:
    """One `field.path: message` line per problem, with camelCase paths as in the YAML."""
    lines = []
    for problem in err.errors():
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"{_path(problem['loc'])}: {message}")
    return lines


def parse_experiment(document: Any, source: str = "<input>") -> BenchmarkExperiment:
    """Validate one parsed YAML/JSON document as a BenchmarkExperiment."""
    if not isinstance(document, dict):
        raise SpecError(source, ["(document): expected a BenchmarkExperiment mapping"])
    try:
        return BenchmarkExperiment.model_validate(document)
    except ValidationError as err:
        raise SpecError(source, format_errors(err)) from None


def load_experiment(path: str | Path) -> BenchmarkExperiment:
    """Read and validate an experiment file (one YAML document)."""
    path = Path(path)
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as err:
        raise SpecError(str(path), [f"(document): not valid YAML: {err}"]) from None
    if len(documents) != 1:
        raise SpecError(
            str(path), [f"(document): expected one YAML document, found {len(documents)}"]
        )
    return parse_experiment(documents[0], str(path))
