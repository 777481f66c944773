"""One fault per experiment, in the middle of a run: a worker pod deleted in the measured
window, a worker out of the Service for part of it (its readiness probe failed, then passed:
Ready and unchanged by the window's end), a worker that crash-loops, a worker never Ready,
the load generator's pod killed, past its deadline, or deleted, a worker's node gone away for a
while (on the real nodes, as all of these run). Each disturbed window is
retried or the run failed with a reason, never recorded good; partial results are kept and
marked; nothing is left behind."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from campaign import STEPS, Driver
from experiments import small_experiment
from invariants import check_experiment, delete_leaving_nothing

from kvbench.api import RunRecord
from kvbench.kube.store import ConfigMapStore
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import apply, wait_phase
from kvbench.testing.readiness import flip_readiness
from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.slow
WINDOW = next(s for s in STEPS if s.name == "measured window")


@dataclass(frozen=True)
class Fault:
    """A fault, what it does in the run's measured window, and what the first run must show."""

    name: str
    spec: dict
    inject: Callable[[Driver], set[str]] | None
    check: Callable[[RunRecord], None]


def _delete_worker(driver: Driver) -> set[str]:
    return {driver.delete_pod(driver.run_pods("worker")[0])}


def _out_of_the_service(driver: Driver) -> set[str]:
    pod = driver.run_pods("worker")[0]
    flip_readiness(driver.core, driver.namespace, pod.metadata.name)
    return {str(pod.metadata.uid)}


def _measuring_load(driver: Driver) -> Any:
    """The run's load generator pod, once it is in its measured window."""
    pods = wait_for(lambda: driver.run_pods("loadgen"), 120, "the load generator to run")
    [pod] = pods
    driver.wait_measuring(pod)
    return pod


def _kill_load(driver: Driver) -> set[str]:
    return {driver.kill_container(_measuring_load(driver))}


def _delete_load(driver: Driver) -> set[str]:
    pod = _measuring_load(driver)
    driver.core.delete_namespaced_pod(pod.metadata.name, driver.namespace)  # with its grace
    return set()


def _node_goes_away(driver: Driver) -> set[str]:
    """A worker's node goes away in the window (its link cut, every process on it killed),
    stays away until the node controller marks it NotReady, then boots again."""
    pod = driver.run_pods("worker")[0]
    fleet = driver.cluster.fleet
    assert fleet is not None, "a node can go away only on the real nodes"
    node = fleet.node(pod.spec.node_name)
    node.go_away()
    try:
        wait_for(lambda: not node_ready(driver.core, node.name), 120, f"{node.name} NotReady")
    finally:
        node.come_back()
    wait_for(lambda: node_ready(driver.core, node.name), 120, f"{node.name} Ready again")
    return {str(pod.metadata.uid)}


def node_ready(core: Any, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _retried(reason: str, partial: bool = False) -> Callable[[RunRecord], None]:
    def check(record: RunRecord) -> None:
        assert record.error is None and record.attempt == 2, record
        [failure] = record.failed_attempts
        assert failure.reason == reason, failure
        assert failure.partial is partial
        if partial:
            assert failure.raw_results is not None

    return check


def _retried_saying(reason: str, words: str) -> Callable[[RunRecord], None]:
    def check(record: RunRecord) -> None:
        _retried(reason)(record)
        assert words in record.failed_attempts[0].message, record.failed_attempts[0].message

    return check


def _failed(reason: str, words: str, partial: bool = False) -> Callable[[RunRecord], None]:
    def check(record: RunRecord) -> None:
        assert record.error_reason == reason, record
        assert words in record.error, record.error
        assert all(f.partial is partial for f in record.failed_attempts)
        assert len(record.failed_attempts) == 2, "one retry, then failed"

    return check


LONG = {"sharedPrefix": {"requestsPerPrefix": 60, "minRequests": 120}}
# A load fault's window at half real time, about 10 s: at the default 0.05 it is about 1 s,
# which a graceful delete's way through the API server and the kubelet can outlast on a busy
# machine; the load generator then ends its window whole, rightly recorded good.
SLOW = {"timeScale": 0.5}
FAULTS = [
    Fault("worker deleted in the window", {}, _delete_worker, _retried("WorkersDisturbed")),
    Fault(  # a window long enough to outlast the flip: the worker is back by its end
        "worker out of the Service in the window",
        {"workload": LONG, "simulator": {"timeScale": 0.5}},
        _out_of_the_service,
        _retried_saying("WorkersDisturbed", "the Service's endpoints"),
    ),
    Fault(
        "worker crash-loops",
        {
            "engine": {"extraArgs": ["--tokenizer", "/nonexistent/tokenizer"]},
            "timeouts": {"workersReady": "20s"},
        },
        None,
        _failed("WorkersNotReady", "gpu-0"),
    ),
    Fault(
        "worker never Ready",
        {"engine": {"extraArgs": ["--load-seconds", "600"]}, "timeouts": {"workersReady": "8s"}},
        None,
        _failed("WorkersNotReady", "gpu-0"),
    ),
    Fault(  # both in a window long enough that the fault lands inside it
        "load generator killed",
        {"workload": LONG, "simulator": SLOW},
        _kill_load,
        _retried("LoadFailed"),
    ),
    Fault(
        "load generator past its deadline",
        {"timeouts": {"run": "10s"}, "simulator": {"timeScale": 0.5}, "workload": LONG},
        None,
        _failed("RunTimeout", "partial result is kept", partial=True),
    ),
    Fault(  # the window outlasts the node controller's 40 s grace before NotReady
        "a worker's node goes away and comes back",
        {"workload": LONG, "simulator": {"timeScale": 0.25}},
        _node_goes_away,
        _retried("WorkersDisturbed"),
    ),
    Fault(
        "load generator deleted",
        {"workload": LONG, "simulator": SLOW},
        _delete_load,
        _retried("LoadStopped", partial=True),
    ),
]


def _spec(fault: Fault, name: str) -> dict:
    """The campaign's small experiment cut to its first run: every fault lands in run 0."""
    document = small_experiment(name)
    spec = document["spec"]
    spec["workload"]["sharedPrefix"]["prefixes"] = [2]
    for key, value in fault.spec.items():
        spec[key] = _merged(spec.get(key, {}), value)
    return document


def _merged(base: dict, change: dict) -> dict:
    return {
        k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        for k, v in {**base, **change}.items()
    }


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_a_fault_in_a_run_is_retried_or_failed_never_recorded_good(
    cluster: TestCluster, namespace: str, operator: dict, seed: int, fault: Fault, tmp_path: Path
) -> None:
    name = "faulty"
    document = _spec(fault, name)
    apply(cluster, namespace, document)
    driver = Driver(cluster, namespace, name, seed)
    disturbed: set[str] = set()
    if fault.inject is not None:
        status = driver.wait_step(WINDOW, 600)
        assert status is not None, "the experiment ended before the fault"
        disturbed = fault.inject(driver)
        driver.note(fault.name, WINDOW, status, pods=sorted(disturbed))
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    (tmp_path / "faults.json").write_text(json.dumps(driver.log, indent=1))
    verdict = check_experiment(cluster, namespace, body, disturbed)
    print(f"{fault.name}: {verdict}")
    assert verdict.violations == []
    store = ConfigMapStore(driver.core, namespace, name, body["metadata"]["uid"], {})
    store.load()
    first = next(r for r in store.records() if r.index == 0)
    fault.check(first)
    if fault.inject is not None:
        assert body["status"]["phase"] == "Succeeded", body["status"]
        assert verdict.recorded == verdict.planned
    delete_leaving_nothing(cluster, namespace, name)
