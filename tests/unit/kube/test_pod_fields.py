"""The pod fields a real kubelet and a real vLLM need, read from the rendered objects: the
model cache reachable by uid 10001 (shared or per pod), a user name for a uid without a
passwd entry, /dev/shm, a RuntimeClass, probes a saturated worker passes, requests on every
pod, and the load generator and router kept off GPU nodes whatever affinity the spec adds."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.api.workers import WorkerPool
from kvbench.kube.manifests import (
    GPU_PRESENT,
    ExperimentRef,
    load_job,
    router_objects,
    worker_objects,
)
from kvbench.kube.validation import validate_manifest
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames

ROOT = Path(__file__).resolve().parents[3]
UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
REF = ExperimentRef(name="bx", namespace="bench", uid=UID)
GPU_FREE = {"key": GPU_PRESENT, "operator": "NotIn", "values": ["true"]}


def _spec(on_cluster: bool = False, **changes: Any):
    """The KV-aware example (a Service and two router arms) with `changes` to its spec,
    each a path of keys joined by `__` (list indices as numbers) to a value."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["simulator"] = {"onCluster": on_cluster}
    for path, value in changes.items():
        node: Any = document["spec"]
        *parents, last = path.split("__")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[last] = copy.deepcopy(value)
    return parse_experiment(document)


def _statefulset(experiment) -> dict:
    spec = experiment.spec
    objects = worker_objects(REF, spec, "default", spec.engine)
    (statefulset,) = [o for o in objects if o["kind"] == "StatefulSet"]
    assert validate_manifest(statefulset) == []
    return statefulset


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _engine(experiment) -> dict:
    return _pod(_statefulset(experiment))["containers"][0]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


def _router(experiment, arm: int = 1) -> dict:
    names = ChildNames(experiment="bx", index=0, attempt=1)
    router = experiment.spec.routing[arm].router
    (deployment,) = [
        o
        for o in router_objects(REF, router, names, ["http://10.0.0.1:8000"])
        if o["kind"] == "Deployment"
    ]
    assert validate_manifest(deployment) == []
    return deployment


def _job(experiment) -> dict:
    run = plan_experiment(experiment).runs[0]
    names = ChildNames(experiment="bx", index=run.index, attempt=1)
    job = load_job(REF, experiment.spec, names, [f"{names.prefix}-result-0"])
    assert validate_manifest(job) == []
    return job


# 4. The model cache


def test_the_model_cache_is_mounted_outside_root_and_its_group_is_the_pods() -> None:
    """vLLM's image keeps /root at 0700 and the pods run as 10001: the cache (and HF_HOME)
    goes elsewhere, and the kubelet gives a claim's files to group 10001."""
    experiment = _spec(engine__modelCache={"persistentVolumeClaim": "hf-cache"})
    statefulset = _statefulset(experiment)
    container = _pod(statefulset)["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["model-cache"] == "/models"
    assert _env(container)["HF_HOME"] == "/models"
    context = _pod(statefulset)["securityContext"]
    assert (context["fsGroup"], context["fsGroupChangePolicy"]) == (10001, "OnRootMismatch")


def test_a_shared_claim_is_the_same_claim_in_every_replica() -> None:
    experiment = _spec(engine__modelCache={"persistentVolumeClaim": "hf-cache"})
    statefulset = _statefulset(experiment)
    volumes = {v["name"]: v for v in _pod(statefulset)["volumes"]}
    assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "hf-cache"}
    assert "volumeClaimTemplates" not in statefulset["spec"]


def test_a_per_pod_claim_is_a_claim_template_the_experiment_owns() -> None:
    """ReadWriteOnce storage works only with a claim per pod: a volumeClaimTemplate of the
    size and class asked, owned by the experiment (its deletion removes the claims) without
    blocking it, which the StatefulSet controller could not be allowed to set."""
    cache = {"perPodClaim": {"size": "100Gi", "storageClassName": "fast-ssd"}}
    statefulset = _statefulset(_spec(engine__modelCache=cache))
    (template,) = statefulset["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "model-cache"
    assert template["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(100 << 30)}},
        "storageClassName": "fast-ssd",
    }
    (owner,) = template["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["blockOwnerDeletion"]) == (
        "BenchmarkExperiment",
        UID,
        False,
    )
    assert "controller" not in owner
    pod = _pod(statefulset)
    assert "model-cache" not in {v["name"] for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["model-cache"] == "/models"


# 5. A uid without a passwd entry


@pytest.mark.parametrize("on_cluster", [False, True], ids=["vllm", "simulator"])
def test_workers_name_their_user_for_a_uid_their_image_does_not_know(on_cluster: bool) -> None:
    """vLLM's image has no passwd entry for 10001: getpass.getuser() reads LOGNAME/USER
    before it asks the passwd database (where vLLM on torch < 2.13 dies)."""
    env = _env(_engine(_spec(on_cluster=on_cluster)))
    assert (env["USER"], env["LOGNAME"], env["HOME"]) == ("kvbench", "kvbench", "/tmp")


def test_the_project_image_has_a_passwd_entry_for_its_user() -> None:
    """Why the load generator (the project's image) needs no USER of its own."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "useradd --uid 10001 --gid 10001" in dockerfile


# 6. /dev/shm, RuntimeClass, tolerations


@pytest.mark.parametrize(
    ("changes", "size"),
    [
        ({}, str(2 << 30)),
        ({"engine__tensorParallelSize": 2}, str(16 << 30)),
        ({"workers__0__shmSize": "32Gi"}, str(32 << 30)),
    ],
    ids=["default", "tensor-parallel", "shmSize"],
)
def test_dev_shm_is_memory_of_the_size_the_spec_asks(changes: dict, size: str) -> None:
    """A container runtime's /dev/shm is 64 MiB; tensor parallelism needs far more."""
    pod = _pod(_statefulset(_spec(**changes)))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": size}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm"


def test_a_pool_has_its_runtime_class_and_tolerations() -> None:
    taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = _pod(
        _statefulset(_spec(workers__0__runtimeClassName="nvidia", workers__0__tolerations=[taint]))
    )
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == [taint]
    assert "runtimeClassName" not in _pod(_statefulset(_spec()))


def _readme_gpu_example() -> dict:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Real GPUs, real vLLM", 1)[1]
    return yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])


def test_the_readmes_gpu_example_sets_runtime_class_tolerations_and_a_cache_that_works() -> None:
    example = _readme_gpu_example()
    for pool in example["workers"]:
        assert WorkerPool.model_validate(pool).runtime_class_name
        assert pool["tolerations"]
    experiment = _spec(workers=example["workers"], engine={**example["engine"]})
    statefulset = _statefulset(experiment)
    assert _pod(statefulset)["runtimeClassName"] == example["workers"][0]["runtimeClassName"]
    mounts = {m["name"]: m["mountPath"] for m in _pod(statefulset)["containers"][0]["volumeMounts"]}
    assert not mounts["model-cache"].startswith("/root")


# 7. Probes


def test_worker_probes_let_a_saturated_vllm_stay_ready_and_alive() -> None:
    """/health is answered by the API server's event loop, which a saturated vLLM keeps busy
    for seconds: readiness tolerates a minute of slow answers, liveness longer still, and
    the start-up probe outlasts timeouts.workersReady (so the runner's timeout comes first)."""
    experiment = _spec()
    container = _engine(experiment)
    startup, ready, alive = (
        container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")
    )
    for probe in (startup, ready, alive):
        assert probe["httpGet"]["path"] == "/health"
    assert startup["failureThreshold"] * startup["periodSeconds"] >= (
        experiment.spec.timeouts.workers_ready_seconds
    )
    assert ready["timeoutSeconds"] >= 10, "a saturated vLLM answers /health in seconds"
    slow = ready["failureThreshold"] * max(ready["periodSeconds"], ready["timeoutSeconds"])
    assert slow >= 60, "NotReady only after a minute of slow answers"
    assert alive["timeoutSeconds"] >= ready["timeoutSeconds"]
    assert alive["failureThreshold"] * alive["periodSeconds"] >= 2 * (
        ready["failureThreshold"] * ready["periodSeconds"]
    ), "a worker is taken out of the Service long before it is restarted"


def test_the_router_is_ready_while_it_answers_not_while_every_worker_is_quick() -> None:
    """vllm-router's /health is 503 once its own checker (5 s timeout) counts one busy
    worker unhealthy; a router that leaves its Service mid-window fails the run."""
    container = _pod(_router(_spec()))["containers"][0]
    probe = container["readinessProbe"]
    assert probe["httpGet"]["path"] == "/liveness"
    assert probe["timeoutSeconds"] >= 5
    assert "livenessProbe" not in container


# 8. Resources


def _requests(container: dict) -> dict:
    return container["resources"].get("requests", {})


@pytest.mark.parametrize(
    ("on_cluster", "worker"),
    [(False, {"cpu": "2", "memory": "8Gi"}), (True, {"cpu": "250m", "memory": "256Mi"})],
    ids=["vllm", "simulator"],
)
def test_no_pod_is_best_effort(on_cluster: bool, worker: dict) -> None:
    experiment = _spec(on_cluster=on_cluster)
    engine = _engine(experiment)
    assert {k: _requests(engine)[k] for k in ("cpu", "memory")} == worker
    assert engine["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    router = _pod(_router(experiment))["containers"][0]["resources"]
    assert router == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    loadgen = _pod(_job(experiment))["containers"][0]["resources"]
    assert loadgen == {"requests": {"cpu": "1", "memory": "1Gi"}}


def test_resources_the_spec_names_replace_the_defaults_of_those_resources_only() -> None:
    """A default never contradicts the user: a memory limit alone gets no memory request
    (Kubernetes requests the limit), a CPU request keeps its own value."""
    experiment = _spec(
        workers__0__resources={"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}},
        routing__1__router__resources={"requests": {"cpu": "4"}, "limits": {"cpu": "4"}},
        loadGenerator={"resources": {"limits": {"memory": "2Gi"}}},
    )
    engine = _engine(experiment)["resources"]
    assert engine == {
        "requests": {"cpu": "2"},
        "limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
    }
    router = _pod(_router(experiment))["containers"][0]["resources"]
    assert router == {
        "requests": {"cpu": "4", "memory": "1Gi"},
        "limits": {"cpu": "4", "memory": "4Gi"},
    }
    loadgen = _pod(_job(experiment))["containers"][0]["resources"]
    assert loadgen == {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}


# 9. Placement


def _required_terms(pod: dict) -> list[dict]:
    return pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def test_the_load_generator_stays_off_gpu_nodes_whatever_affinity_the_spec_adds() -> None:
    """Node selector terms are ORed: the GPU-free rule is in each of the user's, and the
    rest of the user's affinity is kept as written."""
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    pool = {"key": "pool", "operator": "In", "values": ["cpu"]}
    spread = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
        ]
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [pool]}]
            }
        },
        "podAntiAffinity": spread,
    }
    experiment = _spec(loadGenerator={"affinity": affinity})
    pod = _pod(_job(experiment))
    assert _required_terms(pod) == [
        {"matchExpressions": [zone, GPU_FREE]},
        {"matchExpressions": [pool, GPU_FREE]},
    ]
    assert pod["affinity"]["podAntiAffinity"] == spread
    assert experiment.spec.load_generator.affinity == affinity, "the spec is not changed"


def test_a_preferred_only_affinity_still_gets_the_required_rule() -> None:
    preferred = [{"weight": 5, "preference": {"matchExpressions": [GPU_FREE]}}]
    experiment = _spec(
        loadGenerator={
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
            }
        }
    )
    node_affinity = _pod(_job(experiment))["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert _required_terms(_pod(_job(experiment))) == [{"matchExpressions": [GPU_FREE]}]


def test_the_router_stays_off_gpu_nodes() -> None:
    assert _required_terms(_pod(_router(_spec()))) == [{"matchExpressions": [GPU_FREE]}]
