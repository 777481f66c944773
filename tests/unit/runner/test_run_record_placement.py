"""What a run record says ran, beside its figures: the nodes of the load generator and (router
arms) the router, as the back end found them after the load (`Cluster.load_placement`), and
the variables kvbench set on each server start, in their own field, never in its image."""

import asyncio
import json
from pathlib import Path

import yaml
from fake_cluster import FakeCluster

from kvbench.api import EngineEnvDefault, PodResult, RunPlacement, parse_experiment
from kvbench.api.routing import RoutingArm
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster import ChildNames
from kvbench.runner.cluster.local.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]
FLASHINFER = EngineEnvDefault(value="0", reason="flashinfer is not installed")


class DefaultsCluster(FakeCluster):
    """Workers kvbench set VLLM_USE_FLASHINFER_SAMPLER=0 on, as `--engine vllm` does where
    flashinfer is missing; the image is the version alone."""

    async def start_workers(self, spec, variant, engine, arm, names):
        workers = await super().start_workers(spec, variant, engine, arm, names)
        defaults = {"VLLM_USE_FLASHINFER_SAMPLER": FLASHINFER}
        return [
            w.model_copy(update={"image": "vllm 0.25.0", "engine_env_defaults": defaults})
            for w in workers
        ]


def _experiment():
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["routing"].append({"name": "round-robin", "router": {"policy": "round_robin"}})
    return parse_experiment(document)


def test_every_record_names_the_load_generators_node_and_a_routers(tmp_path: Path) -> None:
    """The bug: the back end read both nodes (to refuse GPU nodes) and no record kept them."""
    store = DirectoryStore(tmp_path)
    asyncio.run(ExperimentRunner(_experiment(), FakeCluster(), store).run())
    records = store.records()
    assert {r.arm for r in records} == {"service", "round-robin"}
    for r in records:
        router = "cpu-1" if r.arm == "round-robin" else None
        assert r.placement == RunPlacement(load_generator="cpu-0", router=router), r.id
    stored = json.loads((tmp_path / "runs" / "r0.json").read_text())
    assert stored["placement"] == {"loadGenerator": "cpu-0"}


def test_every_pod_record_names_the_variables_kvbench_set_apart_from_its_image(
    tmp_path: Path,
) -> None:
    """The bug: they rode in the image string, which is what the report prints as the engine."""
    store = DirectoryStore(tmp_path)
    asyncio.run(ExperimentRunner(_experiment(), DefaultsCluster(), store).run())
    pods = [p for r in store.records() for p in r.pods]
    assert pods and all(p.image == "vllm 0.25.0" for p in pods)
    assert all(p.engine_env_defaults == {"VLLM_USE_FLASHINFER_SAMPLER": FLASHINFER} for p in pods)


def test_records_from_before_read_the_variables_out_of_the_image() -> None:
    """The committed real-vLLM result still loads; its image note becomes the new field."""
    runs = ROOT / "bench" / "results" / "real-vllm-arms-6w" / "runs"
    document = json.loads((runs / "r0.json").read_text())
    assert "kvbench set" in document["pods"][0]["image"], "the old form, as committed"
    pod = PodResult.model_validate(document["pods"][0])
    assert pod.image == "vllm 0.25.0"
    assert pod.engine_env_defaults == {
        "VLLM_USE_FLASHINFER_SAMPLER": EngineEnvDefault(
            value="0", reason="a package it needs is not installed"
        )
    }
    plain = PodResult(pod="w", image="vllm/vllm-openai:v0.31.0")
    assert plain.image == "vllm/vllm-openai:v0.31.0" and plain.engine_env_defaults == {}


def test_the_local_back_end_places_everything_on_its_workers_node(tmp_path: Path) -> None:
    names = ChildNames(experiment="x", index=0, attempt=1)
    router = RoutingArm.model_validate({"name": "r", "router": {"policy": "round_robin"}})
    service = RoutingArm.model_validate({"name": "s", "service": {}})
    cluster = LocalCluster(tmp_path)
    assert asyncio.run(cluster.load_placement(router, names)) == RunPlacement(
        load_generator="local", router="local"
    )
    assert asyncio.run(cluster.load_placement(service, names)) == RunPlacement(
        load_generator="local"
    )
