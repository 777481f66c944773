"""The workers: one StatefulSet per pool behind a headless Service, and the ClusterIP Service
that `service` arms measure. vLLM's flags are an argument list, never a shell string."""

import json
from typing import Any

from kvbench.api import API_VERSION, KIND, EngineSpec, ExperimentSpec, WorkerPool
from kvbench.api.workers import SIMULATOR_REQUESTS, VLLM_REQUESTS
from kvbench.kube.manifests.common import (
    LABEL_POOL,
    POD_ENV,
    ExperimentRef,
    Manifest,
    container_security,
    placement,
    pod_security,
    resources,
    tmp_mount,
    tmp_volume,
)

KV_EVENTS_PORT = 5557
RUN_AS = "kvbench"
"""USER and LOGNAME of the workers' uid 10001, which vLLM's image has no passwd entry for:
Python's getpass.getuser() reads them before it asks the passwd database, where vLLM on
torch < 2.13 dies with KeyError (llm-d-benchmark sets USER for the same reason)."""


def _env(engine: EngineSpec) -> list[dict[str, Any]]:
    env = [
        *POD_ENV,
        {"name": "HOME", "value": "/tmp"},
        {"name": "USER", "value": RUN_AS},
        {"name": "LOGNAME", "value": RUN_AS},
    ]
    for var in engine.env:
        env.append(var.to_k8s())
    if engine.hub_token_secret is not None:
        ref = engine.hub_token_secret
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    return env


def _needs_kv_events(spec: ExperimentSpec) -> bool:
    return any(a.router is not None and a.router.policy == "kv_aware" for a in spec.routing)


def engine_args(spec: ExperimentSpec, engine: EngineSpec, pool: WorkerPool) -> list[str]:
    """The worker's argument list: vLLM's flags; under the simulator its own flags too.

    KV events are published on `tcp://*:PORT`: vLLM's publisher binds an endpoint with `*` and
    connects to any other, and the router connects to every pod's `tcp://POD_IP:PORT`."""
    args = [*engine.vllm_args(), "--host", "$(POD_IP)"]
    if _needs_kv_events(spec):
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        }
        args += ["--kv-events-config", json.dumps(events, separators=(",", ":"))]
    if not spec.simulator.on_cluster:
        return args
    args += ["--worker-id", "$(POD_NAME)", *spec.simulator.flags(pool)]
    return args


def _probes(engine: EngineSpec, ready_seconds: float) -> dict[str, Any]:
    """The worker's probes, all on /health (a flag check, but answered by the API server's
    event loop, which a saturated vLLM keeps busy for seconds).

    startup: every 2 s until it answers, for longer than `timeouts.workersReady`, so the
    runner's own timeout (with the pod's log) comes first, never a kubelet restart.
    readiness: NotReady only after 6 answers missed in a row, each given 10 s, a minute of
    them (llm-d-benchmark raised its decode pods' to 15 s x 10 after its 1 s default dropped
    saturated pods from their pool): a benchmark's pool must not shrink in a window.
    liveness: restarts only an engine that failed for two minutes (/health is 503 once the
    engine is dead), never a busy one."""
    check = {"httpGet": {"path": "/health", "port": engine.port}}
    return {
        "startupProbe": {
            **check,
            "periodSeconds": 2,
            "timeoutSeconds": 5,
            "failureThreshold": int(ready_seconds) // 2 + 5,
        },
        "readinessProbe": {
            **check,
            "periodSeconds": 5,
            "timeoutSeconds": 10,
            "failureThreshold": 6,
        },
        "livenessProbe": {
            **check,
            "periodSeconds": 10,
            "timeoutSeconds": 10,
            "failureThreshold": 12,
        },
    }


def _engine_container(
    exp: ExperimentRef, spec: ExperimentSpec, engine: EngineSpec, pool: WorkerPool
) -> dict[str, Any]:
    if spec.simulator.on_cluster:
        image = spec.simulator.image or exp.image
        command = ["kvbench", "sim", "serve"]
        defaults = SIMULATOR_REQUESTS
    else:
        image, command = engine.image, ["vllm", "serve"]
        defaults = VLLM_REQUESTS
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "command": command,
        "args": engine_args(spec, engine, pool),
        "env": _env(engine),
        "ports": [{"name": "http", "containerPort": engine.port}],
        **_probes(engine, spec.timeouts.workers_ready_seconds),
        "resources": resources(pool.resources.with_defaults(defaults)),
        # The simulator is the project's image; vLLM's keeps a writable root (Pod hardening).
        "securityContext": container_security(read_only_root=spec.simulator.on_cluster),
        "volumeMounts": [tmp_mount(), {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if engine.model_cache is not None:
        container["volumeMounts"].append(
            {"name": "model-cache", "mountPath": engine.model_cache.mount_path}
        )
        container["env"].append({"name": "HF_HOME", "value": engine.model_cache.mount_path})
    return container


def _volumes(engine: EngineSpec, pool: WorkerPool) -> list[dict[str, Any]]:
    """Scratch, a memory-backed /dev/shm (a container runtime's own is 64 MiB, which
    tensor parallelism outgrows), and the model cache unless it is a claim per pod."""
    shm = {"medium": "Memory", "sizeLimit": str(pool.shm_bytes(engine.tensor_parallel_size))}
    volumes: list[dict[str, Any]] = [tmp_volume(), {"name": "dshm", "emptyDir": shm}]
    cache = engine.model_cache
    if cache is None or cache.per_pod_claim is not None:
        return volumes
    if cache.persistent_volume_claim:
        source: dict[str, Any] = {
            "persistentVolumeClaim": {"claimName": cache.persistent_volume_claim}
        }
    elif cache.host_path:
        source = {"hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    else:
        source = {"emptyDir": {"sizeLimit": str(cache.empty_dir_size_limit)}}
    return [*volumes, {"name": "model-cache", **source}]


def _claim_templates(exp: ExperimentRef, engine: EngineSpec) -> dict[str, Any]:
    """A model-cache claim per pod (`model-cache-<statefulset>-<ordinal>`): the pod of the
    same ordinal finds it again on every fresh start. Owned by the experiment (the
    StatefulSet controller copies a template's metadata into each claim), so deleting the
    experiment deletes them: Kubernetes 1.20 has no claim retention policy to say so. Not a
    blocking owner: that would need the controller's account to update experiments'
    finalizers (OwnerReferencesPermissionEnforcement), which it has no right to."""
    cache = engine.model_cache
    if cache is None or cache.per_pod_claim is None:
        return {}
    claim = cache.per_pod_claim
    owner = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": exp.name,
        "uid": exp.uid,
        "blockOwnerDeletion": False,
    }
    metadata = {"name": "model-cache", "ownerReferences": [owner]}
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(claim.size)}},
    }
    if claim.storage_class_name is not None:
        spec["storageClassName"] = claim.storage_class_name
    return {"volumeClaimTemplates": [{"metadata": metadata, "spec": spec}]}


def worker_objects(
    exp: ExperimentRef, spec: ExperimentSpec, variant: str, engine: EngineSpec
) -> list[Manifest]:
    """The headless Service, the ClusterIP Service and one StatefulSet per pool.

    `OnDelete` updates: a variant's template applies when the runner recreates the pods, all
    at once, never by a rolling update in the middle of a run."""
    port = engine.port
    objects: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": exp.metadata(exp.headless, "workers"),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": exp.selector("worker"),
                "ports": [{"name": "http", "port": port, "targetPort": port}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": exp.metadata(exp.service, "service"),
            "spec": {
                "type": "ClusterIP",
                "selector": exp.selector("worker"),
                "ports": [{"name": "http", "port": port, "targetPort": port}],
            },
        },
    ]
    for pool in spec.workers:
        name = exp.statefulset(pool.name)
        runtime_class = {}
        if pool.runtime_class_name is not None:
            runtime_class["runtimeClassName"] = pool.runtime_class_name
        labels = exp.labels("worker", **{LABEL_POOL: pool.name, "kvbench.io/variant": variant})
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": exp.metadata(name, "worker", **{LABEL_POOL: pool.name}),
                "spec": {
                    "serviceName": exp.headless,
                    "replicas": pool.replicas,
                    "podManagementPolicy": "Parallel",
                    "updateStrategy": {"type": "OnDelete"},
                    "selector": {"matchLabels": {**exp.selector("worker"), LABEL_POOL: pool.name}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "automountServiceAccountToken": False,
                            "enableServiceLinks": False,
                            "securityContext": pod_security(volume_group=True),
                            "terminationGracePeriodSeconds": 10,
                            "containers": [_engine_container(exp, spec, engine, pool)],
                            "volumes": _volumes(engine, pool),
                            **runtime_class,
                            **placement(pool),
                        },
                    },
                    **_claim_templates(exp, engine),
                },
            }
        )
    return objects
