"""The operator's own kv_aware objects, run: the worker StatefulSet's container and the router
Deployment's, rendered by `worker_objects` and `router_objects`, `$(POD_IP)` set to loopback
addresses, each container started the way the test cluster's kubelet starts it
(`kvbench.testing.images.local_argv`: `kvbench sim` with the rendered args, the wheel's
`vllm-router` with exactly the rendered args). Requests with repeated prefixes go through the
router, and the router's log must show KV event batches from every worker.

Catches: router args without `--kv-event-block-size`/`--kv-event-model` (the router exits at
start-up), workers told to publish on `tcp://$(POD_IP):5557` (vLLM's publisher then connects,
like the router: nobody listens and the router receives nothing), a router env without the
log filter the back ends count batches with.
"""

import concurrent.futures
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.kube.cluster.arms import kv_event_feed
from kvbench.kube.manifests import ExperimentRef, router_objects, worker_objects
from kvbench.runner.cluster.base import ChildNames, WorkerInfo
from kvbench.runner.cluster.kv_events import kv_event_batches
from kvbench.runner.cluster.local.addresses import LoopbackBlock
from kvbench.testing.images import local_argv
from kvbench.testing.podenv import expand

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PREFIXES = ["alpha", "bravo", "charlie", "delta"]


def _spec():
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 2
    spec["routing"] = [{"name": "kv-aware", "router": {"policy": "kv_aware"}}]
    spec["simulator"] = {"onCluster": True, "timeScale": 0}
    return parse_experiment(document).spec


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    return container


def _in_pod(container: dict[str, Any], pod: str, ip: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The container with `$(VAR)` expanded as the kubelet does, and its environment."""
    env = {**os.environ, "POD_IP": ip, "POD_NAME": pod}
    env.update({v["name"]: expand(v["value"], env) for v in container["env"] if "value" in v})
    expanded = {
        **container,
        "command": [expand(a, env) for a in container.get("command", [])],
        "args": [expand(a, env) for a in container.get("args", [])],
    }
    return expanded, env


class Pods:
    """Processes standing in for pods; every one is stopped at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, container: dict[str, Any], ip: str) -> Path:
        expanded, env = _in_pod(container, name, ip)
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                local_argv(expanded, ip),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        return log

    def wait_http(self, url: str, log: Path, seconds: float = 90) -> None:
        proc = self.procs[-1]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{log.stem} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"{log.stem} did not answer {url} in {seconds:g} s")

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Pods]:
    running = Pods(tmp_path)
    yield running
    running.stop()


def _complete(url: str, model: str, prompt: str) -> None:
    body = {"model": model, "prompt": prompt, "max_tokens": 2}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text


def test_rendered_kv_aware_router_receives_every_workers_kv_events(pods: Pods) -> None:
    spec = _spec()
    engine = spec.engine
    model = engine.served_model_name or engine.model
    ref = ExperimentRef(name="kv", namespace="bench", uid="0" * 8)
    block = LoopbackBlock()
    [statefulset] = [
        m for m in worker_objects(ref, spec, "default", engine) if m["kind"] == "StatefulSet"
    ]
    workers = []
    for i in range(statefulset["spec"]["replicas"]):
        name, ip = f"{statefulset['metadata']['name']}-{i}", block.address()
        log = pods.start(name, _container(statefulset), ip)
        url = f"http://{ip}:{engine.port}"
        pods.wait_http(f"{url}/health", log)
        workers.append(
            WorkerInfo(name=name, pool="gpu", base_url=url, metrics_url=f"{url}/metrics")
        )

    arm = spec.routing[0].router
    names = ChildNames(experiment="kv", index=0, attempt=1)
    urls = [w.base_url for w in workers]
    [deployment] = [
        m
        for m in router_objects(ref, arm, names, urls, kv_event_feed(engine, workers))
        if m["kind"] == "Deployment"
    ]
    router_ip = block.address()
    router_log = pods.start(names.arm, _container(deployment), router_ip)
    router = f"http://{router_ip}:8000"
    pods.wait_http(f"{router}/liveness", router_log)

    # Every worker stores blocks (one request straight to each), and through the router four
    # prefixes repeat, eight requests at a time.
    for worker in workers:
        _complete(worker.base_url, model, "direct " * 120)
    prompts = [f"{p} " * 150 + f"question {i}" for i in range(6) for p in PREFIXES]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda prompt: _complete(router, model, prompt), prompts))

    deadline = time.monotonic() + 10  # the subscriber logs a batch shortly after it arrives
    while True:
        received = kv_event_batches(router_log.read_text(errors="replace"), workers)
        if all(received.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print(f"KV event batches the router received: {received}")
    assert all(n > 0 for n in received.values()), (received, router_log.read_text()[-3000:])
    metrics = httpx.get(f"http://{router_ip}:29000/metrics", timeout=10).text
    assert 'vllm_router_kv_placement_lookups_total{result="hit"}' in metrics, "routed on them"
