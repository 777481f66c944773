"""What the Kubernetes back end writes: valid for current Kubernetes, named within limits,
labelled and owned by the experiment, vLLM's flags as a list, the client off GPU nodes."""

from pathlib import Path

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.kube.cluster import kube_problems
from kvbench.kube.manifests import (
    GPU_PRESENT,
    LABEL_UID,
    ExperimentRef,
    load_job,
    load_objects,
    router_objects,
    worker_objects,
)
from kvbench.kube.validation import validate_manifest
from kvbench.loadgen.config import RunConfig, UrlTarget
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames

ROOT = Path(__file__).resolve().parents[3]
UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"


def _experiment(name: str = "prefix-cache-service", on_cluster: bool = False):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["simulator"] = {"onCluster": on_cluster}
    return parse_experiment(document)


def _everything(experiment) -> list[dict]:
    spec = experiment.spec
    ref = ExperimentRef(name=experiment.metadata.name, namespace="bench", uid=UID)
    run = plan_experiment(experiment).runs[0]
    names = ChildNames(experiment=experiment.metadata.name, index=run.index, attempt=1)
    config = RunConfig(
        model=spec.engine.model, target=UrlTarget(url="http://svc:8000"),
        workload=spec.workload, point=run.point, seed=run.seed,
    )  # fmt: skip
    results = [f"{names.prefix}-result-{i}" for i in range(4)]
    arm = parse_experiment(
        {**yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())}
    ).spec.routing[1]
    return [
        *worker_objects(ref, spec, "default", spec.engine),
        *router_objects(ref, arm.router, names, ["http://10.0.0.1:8000"]),
        *load_objects(ref, names, config, results),
        load_job(ref, spec, names, results),
    ]


@pytest.mark.parametrize("on_cluster", [False, True])
def test_every_manifest_validates_against_current_kubernetes(on_cluster: bool) -> None:
    for manifest in _everything(_experiment(on_cluster=on_cluster)):
        assert validate_manifest(manifest) == [], manifest["kind"]


def test_names_fit_kubernetes_limits_for_the_longest_names() -> None:
    experiment = _experiment(name="e" * 40)
    for manifest in _everything(experiment):
        name = manifest["metadata"]["name"]
        assert len(name) <= 63, name
        if manifest["kind"] == "StatefulSet":
            assert len(name) <= 52, "its pods' controller-revision-hash label must fit"
        assert manifest["metadata"]["labels"][LABEL_UID] == UID
        owner = manifest["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("BenchmarkExperiment", UID)


def test_workers_run_vllm_with_its_flags_as_a_list_on_gpus() -> None:
    objects = worker_objects(
        ExperimentRef(name="x", namespace="bench", uid=UID),
        _experiment().spec,
        "default",
        _experiment().spec.engine,
    )
    sets = [o for o in objects if o["kind"] == "StatefulSet"]
    assert [s["spec"]["replicas"] for s in sets] == [4, 2]
    assert all(s["spec"]["podManagementPolicy"] == "Parallel" for s in sets)
    pod = sets[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.31.0"
    assert container["command"] == ["vllm", "serve"]
    assert container["args"][0] == "Qwen/Qwen3-0.6B"
    assert "--enable-prompt-tokens-details" in container["args"]
    assert all(isinstance(a, str) and " " not in a for a in container["args"])
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["nodeSelector"] == {"kvbench.io/gpu": "rtx-24gb"}
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    services = [o for o in objects if o["kind"] == "Service"]
    assert {s["spec"].get("clusterIP") for s in services} == {"None", None}


def test_on_cluster_simulator_runs_kvbench_sim_with_the_same_vllm_flags() -> None:
    spec = _experiment(on_cluster=True).spec
    objects = worker_objects(
        ExperimentRef(name="x", namespace="b", uid=UID), spec, "d", spec.engine
    )
    container = objects[2]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["kvbench", "sim", "serve"]
    assert container["image"].rsplit("/", 1)[-1].startswith("kvbench")
    assert container["args"][: len(spec.engine.vllm_args())] == spec.engine.vllm_args()
    assert "--profile" in container["args"]


def test_the_load_generator_stays_off_gpu_nodes_and_may_write_only_its_results() -> None:
    objects = _everything(_experiment())
    job = next(o for o in objects if o["kind"] == "Job")
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": GPU_PRESENT, "operator": "NotIn", "values": ["true"]}]}
    ]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    role = next(o for o in objects if o["kind"] == "Role")
    results = [o["metadata"]["name"] for o in objects if o["metadata"]["labels"][
        "kvbench.io/component"] == "results"]  # fmt: skip
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": results,
         "verbs": ["get", "update", "patch"]}
    ]  # fmt: skip
    account = next(o for o in objects if o["kind"] == "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


def test_the_preflight_refuses_what_the_cluster_cannot_run_naming_the_field() -> None:
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-dynamo.yaml").read_text())
    problems = kube_problems(parse_experiment(document).spec)
    assert problems and all(".dynamo: " in p for p in problems)
    assert problems[0].startswith("spec.routing[")
    assert kube_problems(_experiment().spec) == []
