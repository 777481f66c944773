"""What a Service arm tells the runner beyond its URL: what balanced it (kube-proxy's mode on a
cluster, as its ConfigMap says; the local balancer locally); and, on Kubernetes, that a worker
whose readiness probe took it out of the Service for part of the window disturbed the run,
whether the runner watched
(the window's EndpointSlice watch) or was restarted meanwhile (the pod's Ready transition).

The readiness flip is real (`kvbench.testing.readiness`): the worker is stopped until the
kubelet's readiness probe fails, then continued until it is Ready again, so the
end-of-window check alone would find every pod Ready and unchanged."""

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import kubernetes
import pytest
from backends import Backend, KubeBackend, small_experiment

from kvbench.api import Cleanup
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames, UrlEndpoint, WorkerInfo
from kvbench.runner.cluster.local.cluster import LOCAL_BALANCING
from kvbench.runner.mapping import build_run_config
from kvbench.testing.cluster import TestCluster
from kvbench.testing.readiness import flip_readiness

NAMES = ChildNames(experiment="contract", index=0, attempt=1)


async def _service_arm(cluster, experiment) -> tuple[list[WorkerInfo], UrlEndpoint, object]:
    spec = experiment.spec
    run = plan_experiment(experiment).runs[0]
    arm = spec.routing[0]
    assert arm.service is not None
    workers = await cluster.start_workers(spec, run.variant, spec.engine, arm, NAMES)
    endpoint = await cluster.open_arm(spec, arm, workers, NAMES)
    config = build_run_config(spec, run, endpoint, workers, cluster.uses_simulator(spec))
    return workers, endpoint, config


@contextmanager
def _kube_proxy_config(core: kubernetes.client.CoreV1Api, text: str) -> Iterator[None]:
    """kube-system/kube-proxy's `config.conf` replaced for a while (the real nodes' kube-proxy
    read theirs at start: what the operator reports follows the ConfigMap, as it says)."""
    kept = core.read_namespaced_config_map("kube-proxy", "kube-system")
    core.patch_namespaced_config_map("kube-proxy", "kube-system", {"data": {"config.conf": text}})
    try:
        yield
    finally:
        core.patch_namespaced_config_map("kube-proxy", "kube-system", {"data": kept.data})


def test_a_service_arm_says_what_balanced_it(backend: Backend) -> None:
    experiment = small_experiment()

    async def scenario() -> list:
        cluster = backend.cluster()
        workers, endpoint, _ = await _service_arm(cluster, experiment)
        found = [endpoint.balancing]
        if isinstance(backend, KubeBackend):  # again, with kube-proxy in IPVS mode
            await cluster.close_arm()
            arm = experiment.spec.routing[0]
            with _kube_proxy_config(backend.core, "mode: ipvs\nipvs:\n  scheduler: ''\n"):
                endpoint = await cluster.open_arm(experiment.spec, arm, workers, NAMES)
            found.append(endpoint.balancing)
        await cluster.teardown(Cleanup())
        return found

    found = asyncio.run(scenario())
    if isinstance(backend, KubeBackend):
        nodes, ipvs = found  # the real nodes' kube-proxy runs in iptables mode
        assert (nodes.mode, nodes.policy) == ("iptables", "random per connection"), nodes
        assert "kube-system/kube-proxy" in nodes.source, nodes
        assert (ipvs.mode, ipvs.scheduler, ipvs.policy) == (
            "ipvs",
            "rr",
            "round robin per connection",
        )
    else:
        assert found == [LOCAL_BALANCING]
    assert backend.leftovers() == []


# a readiness flip in the window (Kubernetes: the local back end's workers have no probes)


@pytest.fixture
def kube(cluster: TestCluster, namespace: str, experiment_crd: str) -> KubeBackend:
    return KubeBackend(cluster, namespace)


def test_a_worker_out_of_the_service_for_part_of_the_window_is_reported(
    kube: KubeBackend,
) -> None:
    # Flipped once the window has begun (flipped as the Job is made, the worker could be back
    # before the warm-up ends), in a window of about 10 s (half real time).
    experiment = small_experiment(simulator={"timeScale": 0.5})

    async def scenario() -> tuple[list[WorkerInfo], list[str]]:
        cluster = kube.cluster()
        workers, _, config = await _service_arm(cluster, experiment)
        await cluster.start_load(experiment.spec, config, NAMES)
        await asyncio.to_thread(kube.wait_measuring, NAMES)
        await asyncio.to_thread(flip_readiness, kube.core, kube.namespace, workers[1].name)
        await cluster.wait_load(NAMES, 180)
        problems = await cluster.check_workers(workers)
        await cluster.teardown(Cleanup())
        return workers, problems

    workers, problems = asyncio.run(scenario())
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{workers[1].name}: ") and "Service's endpoints" in problems[0]
    assert kube.leftovers() == []


def test_a_restarted_runner_still_finds_a_worker_that_was_out_for_a_while(
    kube: KubeBackend,
) -> None:
    """No watch saw it (the runner that started the load is gone); the pod's Ready condition,
    changed since the worker became Ready, says so."""
    experiment = small_experiment()

    async def first() -> list[WorkerInfo]:
        cluster = kube.cluster()
        workers, _, config = await _service_arm(cluster, experiment)
        await cluster.start_load(experiment.spec, config, NAMES)
        await cluster.detach()
        return workers

    workers = asyncio.run(first())
    flip_readiness(kube.core, kube.namespace, workers[0].name)

    async def second() -> list[str]:
        cluster = kube.cluster()
        await cluster.recover(keep=NAMES)
        await cluster.wait_load(NAMES, 180)
        problems = await cluster.check_workers(workers)
        await cluster.teardown(Cleanup())
        return problems

    problems = asyncio.run(second())
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{workers[0].name}: was not Ready for a while")
    assert kube.leftovers() == []
