"""The contract suite's fixture: every test runs against each back end (`backends.py`), the
Kubernetes one on the test cluster's real nodes."""

from pathlib import Path

import pytest
from backends import Backend, KubeBackend, LocalBackend


@pytest.fixture(params=["local", "kubernetes"])
def backend(request, tmp_path: Path) -> Backend:
    if request.param == "local":
        return LocalBackend(tmp_path / "work")
    request.getfixturevalue("experiment_crd")
    return KubeBackend(request.getfixturevalue("cluster"), request.getfixturevalue("namespace"))
