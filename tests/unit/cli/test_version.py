"""`kvbench --version` says which kvbench runs: pyproject's version from a source tree (where
package metadata is missing, or as old as the editable install), with the commit from a git
checkout, and the package's own version once installed (issue 19, defect 16: a source tree
printed 0.0.0+unknown)."""

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import kvbench
from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = '[project]\nname = "kvbench"\nversion = "9.8.7"\n'


def _version() -> str:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    return result.output.strip()


def _tree(root: Path, pyproject: str = PYPROJECT) -> Path:
    """A source tree laid out as this one (operator/kvbench/), kvbench imported from it."""
    (root / "operator" / "kvbench").mkdir(parents=True)
    (root / "pyproject.toml").write_text(pyproject)
    return root / "operator" / "kvbench" / "__init__.py"


def test_this_tree_says_its_pyproject_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _version().startswith(f"kvbench, version {version}")


def test_a_source_tree_without_metadata_says_pyprojects_version(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kvbench, "__file__", str(_tree(tmp_path)))
    monkeypatch.setattr(kvbench, "__version__", "0.0.0+unknown")
    assert _version() == "kvbench, version 9.8.7"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_git_checkout_adds_its_commit(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kvbench, "__file__", str(_tree(tmp_path)))

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    git("init", "-q")
    git("add", "pyproject.toml")
    git("commit", "-q", "-m", "one")
    commit = git("rev-parse", "--short", "HEAD")
    assert _version() == f"kvbench, version 9.8.7 (git {commit})"
    git("tag", "v9.8.7")
    assert _version() == "kvbench, version 9.8.7 (git v9.8.7)"
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + "# edited\n")
    assert _version() == "kvbench, version 9.8.7 (git v9.8.7-dirty)"


def test_an_installed_package_says_its_own_version(tmp_path, monkeypatch) -> None:
    site = tmp_path / "lib" / "python3" / "site-packages" / "kvbench"
    site.mkdir(parents=True)
    monkeypatch.setattr(kvbench, "__file__", str(site / "__init__.py"))
    monkeypatch.setattr(kvbench, "__version__", "1.2.3")
    assert _version() == "kvbench, version 1.2.3"
    other = _tree(tmp_path / "other", PYPROJECT.replace('"kvbench"', '"not-kvbench"'))
    monkeypatch.setattr(kvbench, "__file__", str(other))
    assert _version() == "kvbench, version 1.2.3", "another project's pyproject is not ours"
