"""Reading a BenchmarkExperiment from YAML, with errors that name the field in the file's terms.

A file is read within bounds before anything is built from it: at most `MAX_FILE_BYTES`,
nested at most `MAX_YAML_DEPTH` deep (PyYAML's scanner takes time quadratic in the depth: 100,000
brackets would keep it busy for a minute), and at most `MAX_YAML_NODES` nodes once every alias
is written out, so an alias bomb (a few hundred bytes that expand to a billion strings) is
refused before validation walks it.

A relative `workload.trace.file` is read from the experiment file's directory: it is made
absolute here, so the runner and the load generator find it wherever they run from.
"""

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvbench.api.experiment import BenchmarkExperiment

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "SpecError",
    "format_errors",
    "load_experiment",
    "parse_experiment",
]

MAX_FILE_BYTES = 1 << 20
"""1 MiB: below the ~1.5 MB etcd stores for one object, hundreds of times a real spec."""
MAX_YAML_DEPTH = 64
"""Nested collections; a real spec goes about ten deep (an affinity block)."""
MAX_YAML_NODES = 100_000
"""Nodes of one document with its aliases expanded; a real spec has a few hundred."""
_SHOWN_PROBLEMS = 20
_LINE_CHARS = 400


class SpecError(ValueError):
    """An experiment file that cannot be used; `problems` lists `path: message` lines.

    The message shows the first problems, each cut to a line's length, so a hostile spec's
    thousand errors or a 10,000-character key still make a condition the API server stores."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        shown = [_cut(p) for p in problems[:_SHOWN_PROBLEMS]]
        if len(problems) > _SHOWN_PROBLEMS:
            shown.append(f"... and {len(problems) - _SHOWN_PROBLEMS} more")
        super().__init__(f"{_cut(source)}: invalid BenchmarkExperiment\n  " + "\n  ".join(shown))


def _cut(text: str) -> str:
    return text if len(text) <= _LINE_CHARS else text[: _LINE_CHARS - 3] + "..."


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
    except RecursionError:
        raise SpecError(source, ["(document): nested too deeply"]) from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes `root` has with every alias written out (counting stops past
    `MAX_YAML_NODES`); a node an alias makes contain itself is refused."""
    sizes: dict[int, int] = {}
    ancestors: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            ancestors.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(total, MAX_YAML_NODES + 1)
        elif key in ancestors:
            raise ValueError("an alias refers to a node that contains it")
        elif key not in sizes:
            ancestors.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
    return sizes[id(root)]


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing to compose deeper than `MAX_YAML_DEPTH` (it composes
    as it reads, so the rest of a deep file is never scanned)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise ValueError(f"nested more than {MAX_YAML_DEPTH} deep")
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1


def _documents(text: str) -> list[Any]:
    """The file's non-empty documents, each checked for size before it is built."""
    loader = _BoundedLoader(text)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if _expanded_nodes(node) > MAX_YAML_NODES:
                raise ValueError(
                    f"more than {MAX_YAML_NODES} nodes with its aliases expanded (an alias bomb?)"
                )
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
    finally:
        loader.dispose()
    return documents


def load_experiment(path: str | Path) -> BenchmarkExperiment:
    """Read and validate an experiment file (one YAML document)."""
    path = Path(path)
    with path.open("rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(str(path), [f"(document): larger than {MAX_FILE_BYTES} bytes"])
    try:
        documents = _documents(data.decode("utf-8"))
    except yaml.YAMLError as err:
        raise SpecError(str(path), [f"(document): not valid YAML: {err}"]) from None
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SpecError(
            str(path),
            [f"(document): not UTF-8 text: byte {err.start} (line {line}) is "
             f"0x{data[err.start]:02x}: {err.reason}"],
        ) from None  # fmt: skip
    except ValueError as err:
        raise SpecError(str(path), [f"(document): {err}"]) from None
    if len(documents) != 1:
        raise SpecError(
            str(path), [f"(document): expected one YAML document, found {len(documents)}"]
        )
    experiment = parse_experiment(documents[0], str(path))
    trace = experiment.spec.workload.trace
    if trace is not None and trace.file is not None:
        trace.file = os.path.abspath(path.parent / trace.file)
    return experiment
