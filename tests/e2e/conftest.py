"""The operator installed from its chart and running in the test cluster's real nodes as a
container, under the chart's ServiceAccount, so every API call it makes is checked against the
chart's RBAC."""

from collections.abc import Iterator
from typing import Any

import pytest

from kvbench.testing.cluster import TestCluster
from kvbench.testing.operator_install import installed_operator


@pytest.fixture(scope="module")
def operator(cluster: TestCluster, experiment_crd: str) -> Iterator[dict[str, Any]]:
    """The chart applied with `watch.allNamespaces`; yields the operator's Deployment. Gone
    (pod and all) after each module (pytest's package scope needs an __init__.py), so it never
    picks up other tests' experiments."""
    with installed_operator(cluster) as deployment:
        yield deployment
