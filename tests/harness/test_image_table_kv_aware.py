"""The test cluster's image table for a kv_aware arm: the router image runs what it runs in a
cluster, and workers publishing KV events on every address get their pod's address, as a pod's
network namespace would give them."""

import json
from pathlib import Path

import pytest

from kvbench.kube.manifests.router import ROUTER_IMAGE
from kvbench.testing.images import UnknownImageError, local_argv

POD_IP = "127.64.1.7"
EVENTS = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557"}


def test_the_router_image_runs_the_wheels_launcher_with_the_pods_args_as_they_are() -> None:
    args = ["--host", POD_IP, "--port", "8000", "--policy", "kv_aware", "--kv-event-source", "u=e"]
    argv = local_argv({"image": ROUTER_IMAGE, "command": ["vllm-router"], "args": args}, POD_IP)
    assert argv[1:] == args, "no argument added, dropped or moved"
    launcher = Path(argv[0]).read_text()
    assert "from vllm_router.launch_router import main" in launcher, "the wheel's entry point"


def test_upstreams_router_image_has_no_stand_in() -> None:
    """Its Rust binary refuses kv_aware: the wheel's launcher would pass what it fails."""
    with pytest.raises(UnknownImageError, match="IMAGE_TABLE"):
        local_argv({"image": "docker.io/vllm/vllm-router:v0.1.17", "args": []}, POD_IP)


def _endpoint(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--kv-events-config":
            return json.loads(argv[i + 1])["endpoint"]
        if arg.startswith("--kv-events-config="):
            return json.loads(arg.split("=", 1)[1])["endpoint"]
    raise AssertionError(f"no --kv-events-config in {argv}")


@pytest.mark.parametrize(
    "container",
    [
        {
            "image": "ghcr.io/kvbench/kvbench:0.1.0",
            "command": ["kvbench", "sim", "serve"],
            "args": ["m", "--kv-events-config", json.dumps(EVENTS)],
        },
        {
            "image": "vllm/vllm-openai:v0.31.0",
            "command": ["vllm", "serve"],
            "args": ["m", f"--kv-events-config={json.dumps(EVENTS)}"],
        },
    ],
    ids=["project", "vllm"],
)
def test_a_publisher_on_every_address_binds_the_pods_address(container: dict) -> None:
    """Two pods on one port would collide on the shared machine; the IPv4-mapped form keeps
    `::` in the endpoint, so vLLM's publisher (and the simulator's) still binds it."""
    assert _endpoint(local_argv(container, POD_IP)) == f"tcp://[::ffff:{POD_IP}]:5557"


def test_a_publisher_that_connects_is_left_as_it_is() -> None:
    events = {**EVENTS, "endpoint": "tcp://10.0.0.1:5557"}
    container = {
        "image": "ghcr.io/kvbench/kvbench:0.1.0",
        "command": ["kvbench", "sim", "serve"],
        "args": ["--kv-events-config", json.dumps(events)],
    }
    assert _endpoint(local_argv(container, POD_IP)) == "tcp://10.0.0.1:5557"
