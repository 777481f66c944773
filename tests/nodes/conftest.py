"""tests/nodes run on the real nodes: `cluster`, and every fixture built on it, is that one."""

import pytest

from kvbench.testing.cluster import TestCluster


@pytest.fixture(scope="session")
def cluster(real_cluster: TestCluster) -> TestCluster:
    return real_cluster
