"""The API server itself misbehaving: refusing every write (503 and 409) for a while, and the
whole control plane (etcd, apiserver, controllers) restarted under a running experiment. The
operator rides both out: every run recorded once, nothing lost, nothing left."""

import time

import pytest
from campaign import STEPS, Driver
from experiments import small_experiment
from invariants import check_experiment, delete_leaving_nothing
from refusals import RefusingWebhook

from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import apply, wait_phase

pytestmark = pytest.mark.slow
REFUSAL_SECONDS = 20


def _finish(cluster: TestCluster, namespace: str, name: str, disturbed: set[str]) -> dict:
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    verdict = check_experiment(cluster, namespace, body, disturbed)
    print(f"{name}: {verdict}")
    for record in verdict.retries:
        print(f"  run {record}")
    assert verdict.violations == []
    assert body["status"]["phase"] == "Succeeded", body["status"]
    assert verdict.recorded == verdict.planned
    delete_leaving_nothing(cluster, namespace, name)
    return body


@pytest.mark.parametrize("step", ["workers starting", "measured window"])
def test_writes_refused_for_a_while_cost_no_run(
    cluster: TestCluster, namespace: str, operator: dict, seed: int, step: str
) -> None:
    name = "refused"
    apply(cluster, namespace, small_experiment(name))
    driver = Driver(cluster, namespace, name, seed)
    with RefusingWebhook(cluster, namespace).installed() as webhook:
        status = driver.wait_step(next(s for s in STEPS if s.name == step), 600)
        assert status is not None
        webhook.refusing = True
        time.sleep(REFUSAL_SECONDS)
        webhook.refusing = False
        driver.note(f"writes refused for {REFUSAL_SECONDS} s", None, status, codes=webhook.refused)
    print(f"writes refused at {step}: {webhook.refused}")
    assert webhook.refused[503] > 0 and webhook.refused[409] > 0
    _finish(cluster, namespace, name, set())


def test_a_control_plane_restart_under_a_running_experiment_costs_no_run(
    cluster: TestCluster, namespace: str, operator: dict, seed: int
) -> None:
    name = "restarted"
    apply(cluster, namespace, small_experiment(name))
    driver = Driver(cluster, namespace, name, seed)
    status = driver.wait_step(next(s for s in STEPS if s.name == "measured window"), 600)
    assert status is not None
    began = time.monotonic()
    cluster.restart_control_plane()
    driver.note("control plane restarted", None, status, seconds=time.monotonic() - began)
    print(f"control plane restarted in {time.monotonic() - began:.1f} s")
    _finish(cluster, namespace, name, set())
