"""Shared fixtures: paths of the repository's examples and generated files."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
