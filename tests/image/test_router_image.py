"""The router image (the Dockerfile's `router` target), run the way the router Deployment runs
it: its launcher is the pinned wheel's, which has the kv_aware policy and KV event sources
(upstream's image runs a Rust binary that has neither), as user 10001 on a read-only root with
only /tmp writable, and a kv_aware router from it receives a simulator's KV events."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from image_helpers import ImageRunner, RunningContainer

from kvbench.kube.manifests.common import USER_ID
from kvbench.procs import free_port
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.runner.cluster.kv_events import KvEventFeed, kv_event_batches, router_log_filter
from kvbench.runner.cluster.local.addresses import LoopbackBlock

pytestmark = pytest.mark.slow

_WRITE_PROBE = """
import errno, json, os
outcome = {}
for path in ["/probe", "/etc/probe", "/usr/probe", "/opt/kvbench/probe", "/tmp/probe"]:
    try:
        with open(path, "w") as out:
            out.write("x")
        outcome[path] = "ok"
    except OSError as err:
        outcome[path] = errno.errorcode[err.errno]
print(json.dumps({"writes": outcome, "uid": os.getuid(), "gid": os.getgid()}))
"""
SIM_ARGS = [
    "--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--kv-cache-memory-bytes", "1G",
    "--gpu-memory-utilization", "0.01", "--time-scale", "0", "--worker-id", "host-sim",
]  # fmt: skip


def test_the_launcher_has_kv_aware_and_kv_event_sources(router_runner: ImageRunner) -> None:
    image = router_runner.image
    assert image.entrypoint == ["vllm-router"]
    assert image.user == f"{USER_ID}:{USER_ID}"
    done = router_runner.run(["--help"])
    assert done.returncode == 0, done.stderr
    assert "kv_aware" in done.stdout and "--kv-event-source" in done.stdout
    assert "--kv-event-block-size" in done.stdout and "--kv-event-model" in done.stdout


def test_only_tmp_is_writable_for_the_image_user(router_runner: ImageRunner) -> None:
    assert router_runner.image.volumes == ["/tmp"]
    found = json.loads(router_runner.python(_WRITE_PROBE))
    assert (found["uid"], found["gid"]) == (USER_ID, USER_ID)
    writes = found["writes"]
    for path in ("/probe", "/etc/probe", "/usr/probe", "/opt/kvbench/probe"):
        assert writes.pop(path) == "EROFS", path
    assert writes == {"/tmp/probe": "ok"}


def _wait(url: str, proc: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{url} did not answer in {seconds:g} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


def test_a_kv_aware_router_from_the_image_receives_kv_events(
    router_runner: ImageRunner, tmp_path: Path
) -> None:
    block = LoopbackBlock()
    sim_ip, router_ip = block.address(), block.address()
    events_port = free_port("0.0.0.0")
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{events_port}",
    }
    sim_log, router_log = tmp_path / "sim.log", tmp_path / "router.log"
    sim_argv = [
        sys.executable,
        "-m",
        "kvbench",
        "sim",
        "serve",
        *SIM_ARGS,
        "--host",
        sim_ip,
        "--port",
        "8000",
    ]
    sim_argv += ["--kv-events-config", json.dumps(config)]
    with sim_log.open("wb") as out:
        sim = subprocess.Popen(sim_argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        worker = WorkerInfo(
            name="w", pool="p", base_url=f"http://{sim_ip}:8000", metrics_url="unused"
        )
        _wait(f"{worker.base_url}/health", sim, sim_log)
        feed = KvEventFeed(
            endpoints={worker.base_url: f"tcp://{sim_ip}:{events_port}"},
            block_size=16,
            model="Qwen/Qwen3-0.6B",
        )
        args = ["--host", router_ip, "--port", "8000", "--policy", "kv_aware"]
        args += ["--worker-urls", worker.base_url, *feed.router_args()]
        # RUST_LOG as the router Deployment sets it, for the batch lines counted below.
        env = {"RUST_LOG": router_log_filter([])}
        router = RunningContainer(router_runner, args, router_log, env)
        try:
            _wait(f"http://{router_ip}:8000/liveness", router.proc, router_log)
            assert router.status()["Uid"].split() == [str(USER_ID)] * 4
            for i in range(4):
                body = {
                    "model": "Qwen/Qwen3-0.6B",
                    "prompt": "image " * 100 + str(i),
                    "max_tokens": 2,
                }
                response = httpx.post(
                    f"http://{router_ip}:8000/v1/completions", json=body, timeout=30
                )
                assert response.status_code == 200, response.text
            deadline = time.monotonic() + 10
            while not kv_event_batches(router_log.read_text(), [worker])["w"]:
                assert time.monotonic() < deadline, router_log.read_text()[-3000:]
                time.sleep(0.2)
        finally:
            router.stop()
    finally:
        _stop(sim)
