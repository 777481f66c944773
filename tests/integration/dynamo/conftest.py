"""Fixtures for Dynamo on loopback: the model directory and process checks."""

from __future__ import annotations

import importlib.util

import pytest

from kvbench.dynamo import ModelDir, ensure_model_dir

DYNAMO_MISSING = importlib.util.find_spec("dynamo") is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Dynamo these tests skip, with the reason; .ci/run installs it, so CI runs them."""
    if DYNAMO_MISSING:
        skip = pytest.mark.skip(
            reason="NVIDIA Dynamo is not installed: run scripts/install-dynamo.sh (.ci/run does)"
        )
        for item in items:
            if "integration/dynamo" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> ModelDir:
    return ensure_model_dir(tmp_path_factory.mktemp("dynamo-models"))
