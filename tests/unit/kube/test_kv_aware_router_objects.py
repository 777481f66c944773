"""A kv_aware router arm on Kubernetes: what its Deployment and the workers are told, which image
runs it, and how the back end counts the KV events it received. No API server: a fake one."""

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.kube.cluster.arms import KubeArms, kv_event_feed
from kvbench.kube.manifests import ExperimentRef, engine_args, router_objects
from kvbench.kube.manifests.router import ROUTER_IMAGE
from kvbench.runner.cluster.base import ChildNames, WorkerInfo

ROOT = Path(__file__).resolve().parents[3]
NAMES = ChildNames(experiment="kv", index=3, attempt=2)
REF = ExperimentRef(name="kv", namespace="bench", uid="0b7e3c9a")
ESC = "\x1b[2m"


def _experiment(**spec_changes: Any):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"].update(spec_changes)
    return parse_experiment(document)


def _arm(spec, policy: str = "kv_aware", **router: Any):
    [arm] = [a for a in spec.routing if a.router is not None and a.router.policy == policy]
    return arm.model_copy(update={"router": arm.router.model_copy(update=router)})


def _workers(n: int = 2) -> list[WorkerInfo]:
    return [
        WorkerInfo(
            name=f"kv-gpu-{i}",
            pool="gpu",
            base_url=f"http://10.0.0.{i + 1}:8000",
            metrics_url=f"http://10.0.0.{i + 1}:8000/metrics",
        )
        for i in range(n)
    ]


def _container(manifests: list[dict]) -> dict:
    [deployment] = [m for m in manifests if m["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _flag_values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_kv_aware_router_names_every_source_and_the_cache_identity() -> None:
    """The pinned router exits at start-up ("static KV event sources require worker URLs and
    model identity") when the sources come without block size and model."""
    spec = _experiment().spec
    engine = spec.engine.model_copy(update={"block_size": 32, "served_model_name": "qwen"})
    workers = _workers()
    arm = _arm(spec).router
    container = _container(
        router_objects(
            REF, arm, NAMES, [w.base_url for w in workers], kv_event_feed(engine, workers)
        )
    )
    args = container["args"]
    assert _flag_values(args, "--kv-event-source") == [
        "http://10.0.0.1:8000=tcp://10.0.0.1:5557",
        "http://10.0.0.2:8000=tcp://10.0.0.2:5557",
    ]
    assert _flag_values(args, "--kv-event-block-size") == ["32"]
    assert _flag_values(args, "--kv-event-model") == ["qwen"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["RUST_LOG"] == "vllm_router_rs=info,vllm_router_rs::kv_index::subscriber=debug"


def test_a_router_without_kv_events_gets_no_kv_flags_nor_log_filter() -> None:
    spec = _experiment().spec
    container = _container(router_objects(REF, _arm(spec, "cache_aware").router, NAMES, ["u"]))
    assert not [a for a in container["args"] if a.startswith("--kv-event")]
    assert "RUST_LOG" not in {v["name"] for v in container["env"]}


def test_the_log_filter_keeps_the_level_extra_args_ask_for() -> None:
    spec = _experiment().spec
    arm = _arm(spec, extra_args=["--log-level", "warn"]).router
    feed = kv_event_feed(spec.engine, _workers())
    env = {
        v["name"]: v.get("value")
        for v in _container(router_objects(REF, arm, NAMES, [], feed))["env"]
    }
    assert env["RUST_LOG"] == "vllm_router_rs=warn,vllm_router_rs::kv_index::subscriber=debug"


def test_workers_publish_on_every_address_so_vllm_binds() -> None:
    """vLLM's publisher binds an endpoint with `*` and connects to any other: on
    `tcp://$(POD_IP):5557` it connects, as the router does, and nobody listens."""
    spec = _experiment().spec
    args = engine_args(spec, spec.engine, spec.workers[0])
    config = json.loads(args[args.index("--kv-events-config") + 1])
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
    }


def test_the_default_router_image_is_the_projects_router_at_the_locked_version() -> None:
    """Upstream's vllm/vllm-router runs a Rust binary without kv_aware; the default is the
    Dockerfile's router target, tagged with the vllm-router version requirements.lock pins."""
    lock = (ROOT / "requirements.lock").read_text()
    version = re.search(r"^vllm-router==(\S+)", lock, re.MULTILINE).group(1)
    assert f"ghcr.io/kvbench/kvbench-router:{version}" == ROUTER_IMAGE
    spec = _experiment().spec
    assert _container(router_objects(REF, _arm(spec).router, NAMES, []))["image"] == ROUTER_IMAGE
    own = _arm(spec, image="registry.example/router:1").router
    assert _container(router_objects(REF, own, NAMES, []))["image"] == "registry.example/router:1"


class FakeApi:
    """The reads KubeArms makes: pods by label selector, and a pod's log."""

    def __init__(self, pods: dict[str, dict[str, str]], logs: dict[str, str]) -> None:
        self.pods = pods
        self.logs = logs
        self.selectors: list[str] = []
        self.core = SimpleNamespace(
            list_namespaced_pod=self._list, read_namespaced_pod_log=self._log
        )

    def _list(self, namespace: str, label_selector: str) -> Any:
        self.selectors.append(label_selector)
        wanted = dict(pair.split("=") for pair in label_selector.split(","))
        items = [
            SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels))
            for name, labels in self.pods.items()
            if wanted.items() <= labels.items()
        ]
        return SimpleNamespace(items=items)

    def _log(self, name: str, namespace: str, container: str) -> str:
        assert container == "router"
        return self.logs[name]

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def _batch(url: str, seq: int) -> str:
    return (
        f"{ESC}2026-12-02 04:26:15{ESC} DEBUG vllm_router_rs::kv_index::subscriber: "
        f"kv_index live sequence advanced source={url} rank=0 seq={seq}\n"
    )


def _router_pod() -> dict[str, str]:
    return {
        **REF.selector("router"),
        "kvbench.io/run-index": str(NAMES.index),
        "kvbench.io/attempt": str(NAMES.attempt),
    }


def test_the_router_pods_log_is_counted_per_worker_since_its_start() -> None:
    workers = _workers(3)
    earlier = _batch(workers[2].base_url, 0)  # a start before this one: not this router's
    log = (
        earlier
        + "INFO vllm_router_rs::server: Starting router on 10.0.0.9:8000\n"
        + "".join(_batch(workers[0].base_url, s) for s in range(4))
        + _batch(workers[1].base_url, 0)
        + _batch("http://10.0.0.99:8000", 0)
    )
    api = FakeApi({"kv-r3-a2-arm-5d9f": _router_pod()}, {"kv-r3-a2-arm-5d9f": log})
    arms = KubeArms(api, REF)
    spec = _experiment().spec
    counted = asyncio.run(arms.kv_events(_arm(spec), workers, NAMES))
    assert counted == {"kv-gpu-0": 4, "kv-gpu-1": 1, "kv-gpu-2": 0}
    assert "kvbench.io/attempt=2" in api.selectors[0], "this attempt's router, not another's"
    assert asyncio.run(arms.kv_events(_arm(spec, "cache_aware"), workers, NAMES)) is None
    with pytest.raises(RuntimeError, match="no router pod"):
        asyncio.run(KubeArms(FakeApi({}, {}), REF).kv_events(_arm(spec), workers, NAMES))


def test_the_feed_has_the_block_size_of_the_variant_the_pods_run() -> None:
    variants = [
        {"name": "small", "engine": {"blockSize": 16}},
        {"name": "large", "engine": {"blockSize": 32, "servedModelName": "big"}},
    ]
    spec = _experiment(variants=variants).spec
    workers = _workers()
    labels = {**REF.selector("worker"), "kvbench.io/variant": "large"}
    api = FakeApi({w.name: labels for w in workers}, {})
    feed = asyncio.run(KubeArms(api, REF)._kv_event_feed(spec, workers))
    assert (feed.block_size, feed.model) == (32, "big")
    mixed = FakeApi({"kv-gpu-0": labels, "kv-gpu-1": {**labels, "kvbench.io/variant": "small"}}, {})
    with pytest.raises(RuntimeError, match="not one"):
        asyncio.run(KubeArms(mixed, REF)._kv_event_feed(spec, workers))
