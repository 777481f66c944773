"""Experiment files are read within bounds: an alias bomb, an oversized file, a number Python
will not convert, a nesting too deep or bytes that are not text are refused quickly, naming
the limit, by `load_experiment` and by `kvbench plan`, without building what they describe."""

import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from e2e_table import hostile

from kvbench.api import SpecError, load_experiment
from kvbench.api.files import MAX_FILE_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from kvbench.cli import main


def _file(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _refusal(path: Path) -> tuple[str, float, int]:
    """The SpecError's message, the seconds and the peak bytes Python allocated for it."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(SpecError) as caught:
            load_experiment(path)
        return str(caught.value), time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_billion_laughs_is_refused_quickly_in_little_memory(tmp_path: Path) -> None:
    path = _file(tmp_path, hostile.alias_bomb("bomb"))
    assert path.stat().st_size < 2000
    message, seconds, peak = _refusal(path)
    assert f"more than {MAX_YAML_NODES} nodes" in message, message
    print(f"alias bomb ({path.stat().st_size} bytes, 10^9 strings): refused in {seconds:.3f} s, "
          f"{peak / 2**20:.1f} MiB peak")  # fmt: skip
    assert seconds < 2 and peak < 20 * 2**20


def test_a_few_aliases_read_as_written_out(tmp_path: Path) -> None:
    text = yaml.safe_dump(hostile.base_document("anchors"), sort_keys=False).replace(
        "nodeSelector:", "nodeSelector: &gpu", 1
    )
    text = text.replace("  routing:", "  simulator: {onCluster: true}\n  routing:")
    text += "  loadGenerator:\n    nodeSelector: *gpu\n"
    experiment = load_experiment(_file(tmp_path, text))
    assert experiment.spec.load_generator.node_selector == experiment.spec.workers[0].node_selector


def test_an_alias_inside_itself_is_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(hostile.base_document("loop"), sort_keys=False) + "loop: &loop [*loop]\n"
    message, _, _ = _refusal(_file(tmp_path, text))
    assert "contains it" in message, message


def test_a_file_over_the_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    text = yaml.safe_dump(hostile.base_document("big"), sort_keys=False)
    text += "padding: " + "x" * (10 << 20) + "\n"
    message, seconds, peak = _refusal(_file(tmp_path, text))
    assert f"larger than {MAX_FILE_BYTES} bytes" in message, message
    assert seconds < 1 and peak < 3 * MAX_FILE_BYTES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("apiVersion: kvbench.io/v1alpha1\nseed: " + "9" * 5000 + "\n", "integer string"),
        ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", f"nested more than {MAX_YAML_DEPTH} deep"),
        (b"apiVersion: \xff\xfe\n", "not UTF-8"),
    ],
    ids=["int-5000-digits", "nested-100000", "not-utf8"],
)
def test_unreadable_documents_are_a_spec_error(
    tmp_path: Path, text: str | bytes, expected: str
) -> None:
    message, _, _ = _refusal(_file(tmp_path, text))
    assert expected in message, message


def test_kvbench_plan_refuses_the_bomb_naming_the_limit(tmp_path: Path) -> None:
    path = _file(tmp_path, hostile.alias_bomb("bomb"))
    started = time.monotonic()
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code != 0
    assert f"more than {MAX_YAML_NODES} nodes" in result.output, result.output
    assert time.monotonic() - started < 5


def test_a_spec_error_stays_short_whatever_the_input() -> None:
    problems = [f"spec.workers[{i}].nodeSelector.{'k' * 10_000}: too long" for i in range(500)]
    message = str(SpecError("x.yaml", problems))
    assert len(message) < 10_000 and "... and 480 more" in message
    assert message.splitlines()[1].strip().startswith("spec.workers[0].nodeSelector.kkk")


def test_a_file_that_is_not_utf8_names_the_byte_and_its_line(tmp_path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"apiVersion: kvbench.io/v1alpha1\nkind: BenchmarkExperiment\n# caf\xe9\n")
    with pytest.raises(SpecError, match=r"byte 63 \(line 3\) is 0xe9"):
        load_experiment(path)
