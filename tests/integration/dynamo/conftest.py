"""Fixtures for Dynamo on loopback: the model directory and process checks."""

from __future__ import annotations

import pytest

from kvbench.dynamo import ModelDir, ensure_model_dir


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> ModelDir:
    return ensure_model_dir(tmp_path_factory.mktemp("dynamo-models"))
