"""The workers: one StatefulSet per pool behind a headless Service, and the ClusterIP Service
that `service` arms measure. vLLM's flags are an argument list, never a shell string."""

import json
from typing import Any

from kvbench.api import EngineSpec, ExperimentSpec, WorkerPool
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


def _env(engine: EngineSpec) -> list[dict[str, Any]]:
    env = [*POD_ENV, {"name": "HOME", "value": "/tmp"}]
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
    """The worker's argument list: vLLM's flags; under the simulator its own flags too."""
    args = [*engine.vllm_args(), "--host", "$(POD_IP)"]
    if _needs_kv_events(spec):
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://$(POD_IP):{KV_EVENTS_PORT}",
        }
        args += ["--kv-events-config", json.dumps(events, separators=(",", ":"))]
    if not spec.simulator.on_cluster:
        return args
    args += ["--worker-id", "$(POD_NAME)", *spec.simulator.flags(pool)]
    return args


def _engine_container(
    exp: ExperimentRef, spec: ExperimentSpec, engine: EngineSpec, pool: WorkerPool
) -> dict[str, Any]:
    if spec.simulator.on_cluster:
        image = spec.simulator.image or exp.image
        command = ["kvbench", "sim", "serve"]
    else:
        image, command = engine.image, ["vllm", "serve"]
    ready_seconds = int(spec.timeouts.workers_ready_seconds)
    probe = {"httpGet": {"path": "/health", "port": engine.port}, "periodSeconds": 2}
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "command": command,
        "args": engine_args(spec, engine, pool),
        "env": _env(engine),
        "ports": [{"name": "http", "containerPort": engine.port}],
        "startupProbe": {**probe, "failureThreshold": ready_seconds // 2 + 5},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "resources": resources(pool.resources),
        # The simulator is the project's image; vLLM's keeps a writable root (Pod hardening).
        "securityContext": container_security(read_only_root=spec.simulator.on_cluster),
        "volumeMounts": [tmp_mount()],
    }
    if engine.model_cache is not None:
        container["volumeMounts"].append(
            {"name": "model-cache", "mountPath": engine.model_cache.mount_path}
        )
        container["env"].append({"name": "HF_HOME", "value": engine.model_cache.mount_path})
    return container


def _volumes(engine: EngineSpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [tmp_volume()]
    cache = engine.model_cache
    if cache is None:
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
                            "securityContext": pod_security(),
                            "terminationGracePeriodSeconds": 10,
                            "containers": [_engine_container(exp, spec, engine, pool)],
                            "volumes": _volumes(engine),
                            **placement(pool),
                        },
                    },
                },
            }
        )
    return objects
