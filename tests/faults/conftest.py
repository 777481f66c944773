"""The fault campaign's fixtures: the test cluster on its real nodes, the chart's operator in
it (as in tests/e2e) on the CPU node, and the campaign's seed (KVBENCH_FAULT_SEED, default 1),
printed so a failure can be rerun."""

import os
from collections.abc import Iterator
from typing import Any

import pytest

from kvbench.testing.cluster import TestCluster
from kvbench.testing.operator_install import installed_operator


@pytest.fixture(scope="module")
def operator(cluster: TestCluster, experiment_crd: str) -> Iterator[dict[str, Any]]:
    """On the CPU node, where users put it: a GPU node that goes away takes only workers."""
    values = {"watch": {"allNamespaces": True},
              "nodeSelector": {"kubernetes.io/hostname": "cpu-node-0"}}  # fmt: skip
    with installed_operator(cluster, values) as deployment:
        yield deployment


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("KVBENCH_FAULT_SEED", "1"))
    print(f"fault campaign seed: KVBENCH_FAULT_SEED={value}")
    return value
