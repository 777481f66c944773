"""The objects the Kubernetes back end creates, as pure functions of the spec.

Every child is named from the experiment (and the run's index and attempt), labelled with
the experiment's UID, and owned by the experiment, so two experiments never touch each
other's objects and deleting an experiment deletes everything it made. Every pod passes the
restricted Pod Security Standard (`kvbench.kube.pod_security`; a `modelCache.hostPath` is the
one exception, the user's choice): user and group 10001, no privilege escalation, all
capabilities dropped, a RuntimeDefault seccomp profile, and a read-only root filesystem for
every image known to write only to /tmp (an emptyDir): the project's image and vllm-router's.
vLLM's own image keeps a writable root (docs/operator.md, "Pod hardening", says why). vLLM's
flags are an argument list, never a shell string.
"""

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from kvbench.api import EngineSpec, ExperimentSpec, WorkerPool
from kvbench.api.experiment import API_VERSION, KIND
from kvbench.api.routing import RouterArm
from kvbench.loadgen.config import RunConfig
from kvbench.runner.cluster.base import ChildNames

__all__ = [
    "GPU_PRESENT",
    "LABEL_COMPONENT",
    "LABEL_EXPERIMENT",
    "LABEL_UID",
    "ExperimentRef",
    "kube_name",
    "load_job",
    "load_objects",
    "router_objects",
    "worker_objects",
]

MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_EXPERIMENT = "kvbench.io/experiment"
LABEL_UID = "kvbench.io/experiment-uid"
LABEL_COMPONENT = "kvbench.io/component"
LABEL_POOL = "kvbench.io/pool"
LABEL_RUN = "kvbench.io/run-index"
LABEL_ATTEMPT = "kvbench.io/attempt"
GPU_PRESENT = "nvidia.com/gpu.present"
KV_EVENTS_PORT = 5557
Manifest = dict[str, Any]


def kube_name(*parts: str, limit: int = 63) -> str:
    """`parts` joined by `-`, shortened with a hash of the whole when over `limit`."""
    name = "-".join(parts)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


class ExperimentRef(BaseModel):
    """The experiment resource children are named after and owned by."""

    name: str
    namespace: str
    uid: str
    image: str = "ghcr.io/kvbench/kvbench:0.1.0"
    """The project's image (operator, load generator, simulator)."""

    def labels(self, component: str, **extra: str) -> dict[str, str]:
        return {
            MANAGED_BY: "kvbench",
            LABEL_EXPERIMENT: self.name,
            LABEL_UID: self.uid,
            LABEL_COMPONENT: component,
            **extra,
        }

    def selector(self, component: str) -> dict[str, str]:
        return {LABEL_UID: self.uid, LABEL_COMPONENT: component}

    def metadata(self, name: str, component: str, **extra: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(component, **extra),
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": self.name,
                    "uid": self.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }

    @property
    def headless(self) -> str:
        """The headless Service that gives every worker pod a stable name."""
        return kube_name(self.name, "workers")

    @property
    def service(self) -> str:
        """The ClusterIP Service over every pool's pods: the system under test of service
        arms."""
        return kube_name(self.name, "svc")

    @property
    def load_account(self) -> str:
        return kube_name(self.name, "loadgen")

    def statefulset(self, pool: str) -> str:
        # StatefulSet pods carry `<name>-<hash>` in a label: keep room for it.
        return kube_name(self.name, pool, limit=52)


_USER_ID = 10001
"""The project image's user and group (its Dockerfile); every container runs as them."""


def _pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _security(read_only_root: bool) -> dict[str, Any]:
    """A container's security context. `read_only_root` where the image writes nowhere but
    /tmp (an emptyDir here, and HOME): checked by running it, docs/operator.md says how."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
        "runAsUser": _USER_ID,
        "runAsGroup": _USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _tmp_mount() -> dict[str, Any]:
    return {"name": "tmp", "mountPath": "/tmp"}


def _tmp_volume() -> dict[str, Any]:
    """Scratch space (and HOME) that a read-only root leaves writable."""
    return {"name": "tmp", "emptyDir": {}}


_POD_ENV = [
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
]


def _resources(resources: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resources.requests:
        out["requests"] = {k: str(v) for k, v in resources.requests.items()}
    if resources.limits:
        out["limits"] = {k: str(v) for k, v in resources.limits.items()}
    return out


def _env(engine: EngineSpec) -> list[dict[str, Any]]:
    env = [*_POD_ENV, {"name": "HOME", "value": "/tmp"}]
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
        "resources": _resources(pool.resources),
        # The simulator is the project's image; vLLM's keeps a writable root (Pod hardening).
        "securityContext": _security(read_only_root=spec.simulator.on_cluster),
        "volumeMounts": [_tmp_mount()],
    }
    if engine.model_cache is not None:
        container["volumeMounts"].append(
            {"name": "model-cache", "mountPath": engine.model_cache.mount_path}
        )
        container["env"].append({"name": "HF_HOME", "value": engine.model_cache.mount_path})
    return container


def _volumes(engine: EngineSpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [_tmp_volume()]
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


def _placement(placement: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if placement.node_selector:
        out["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        out["tolerations"] = [t.to_k8s() for t in placement.tolerations]
    if placement.affinity:
        out["affinity"] = placement.affinity
    return out


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
                            "securityContext": _pod_security(),
                            "terminationGracePeriodSeconds": 10,
                            "containers": [_engine_container(exp, spec, engine, pool)],
                            "volumes": _volumes(engine),
                            **_placement(pool),
                        },
                    },
                },
            }
        )
    return objects


def router_objects(
    exp: ExperimentRef,
    arm: RouterArm,
    names: ChildNames,
    worker_urls: list[str],
    kv_event_sources: dict[str, str],
) -> list[Manifest]:
    """A Deployment and Service for vllm-router in front of this run's workers."""
    image = arm.image or "vllm/vllm-router:0.1.17"
    args = ["--host", "$(POD_IP)", "--port", "8000", "--policy", arm.policy]
    args += ["--prometheus-host", "$(POD_IP)", "--prometheus-port", "29000"]
    args += ["--worker-urls", *worker_urls]
    for url, endpoint in kv_event_sources.items():
        args += ["--kv-event-source", f"{url}={endpoint}"]
    args += list(arm.extra_args)
    extra = {LABEL_RUN: str(names.index), LABEL_ATTEMPT: str(names.attempt)}
    selector = {**exp.selector("router"), LABEL_RUN: str(names.index)}
    probe = {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 1}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": exp.metadata(names.arm, "router", **extra),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": exp.labels("router", **extra)},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": _pod_security(),
                        "containers": [
                            {
                                "name": "router",
                                "image": image,
                                "command": ["vllm-router"],
                                "args": args,
                                # A read-only root: HOME where the router may write.
                                "env": [*_POD_ENV, {"name": "HOME", "value": "/tmp"}],
                                "ports": [{"name": "http", "containerPort": 8000}],
                                "readinessProbe": probe,
                                "securityContext": _security(read_only_root=True),
                                "volumeMounts": [_tmp_mount()],
                            }
                        ],
                        "volumes": [_tmp_volume()],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": exp.metadata(names.arm, "router", **extra),
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": "http", "port": 8000, "targetPort": 8000}],
            },
        },
    ]


def _gpu_free_affinity() -> dict[str, Any]:
    """Never on a GPU node (as GPU feature discovery labels them): the client must not
    compete with the servers it measures."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": GPU_PRESENT, "operator": "NotIn", "values": ["true"]}
                        ]
                    }
                ]
            }
        }
    }


def load_objects(
    exp: ExperimentRef, names: ChildNames, config: RunConfig, result_names: list[str]
) -> list[Manifest]:
    """What one attempt's load generator needs before its Job: its run config, empty result
    ConfigMaps, and a Role that lets it write exactly those."""
    extra = {LABEL_RUN: str(names.index), LABEL_ATTEMPT: str(names.attempt)}
    config_map: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": exp.metadata(kube_name(names.prefix, "config"), "loadgen", **extra),
        "data": {"run.json": config.model_dump_json(indent=1)},
    }
    results = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": exp.metadata(name, "results", **extra),
        }
        for name in result_names
    ]
    role_name = kube_name(names.prefix, "loadgen")
    access = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": exp.metadata(exp.load_account, "loadgen"),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": exp.metadata(role_name, "loadgen", **extra),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": list(result_names),
                    "verbs": ["get", "update", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": exp.metadata(role_name, "loadgen", **extra),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": role_name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": exp.load_account, "namespace": exp.namespace}
            ],
        },
    ]
    return [config_map, *results, *access]


def load_job(
    exp: ExperimentRef,
    spec: ExperimentSpec,
    names: ChildNames,
    result_names: list[str],
) -> Manifest:
    """The attempt's Job: `kvbench loadgen` on a GPU-less node, its result written into the
    result ConfigMaps the moment it ends, whoever watches."""
    placement = spec.load_generator
    pod_placement = _placement(placement)
    if "affinity" not in pod_placement:
        pod_placement["affinity"] = _gpu_free_affinity()
    extra = {LABEL_RUN: str(names.index), LABEL_ATTEMPT: str(names.attempt)}
    out = f"{exp.namespace}/" + ",".join(result_names)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": exp.metadata(names.load, "loadgen", **extra),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(spec.timeouts.run_seconds),
            "template": {
                "metadata": {"labels": exp.labels("loadgen", **extra)},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": exp.load_account,
                    "automountServiceAccountToken": True,
                    "enableServiceLinks": False,
                    "securityContext": _pod_security(),
                    "containers": [
                        {
                            "name": "loadgen",
                            "image": placement.image or exp.image,
                            "command": ["kvbench", "loadgen"],
                            "args": ["--config", "/config/run.json", "--out-configmaps", out],
                            "env": [
                                {
                                    "name": "POD_UID",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
                                }
                            ],
                            "resources": _resources(placement.resources),
                            "securityContext": _security(read_only_root=True),
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/config", "readOnly": True},
                                _tmp_mount(),
                            ],
                        }
                    ],
                    "volumes": [
                        _tmp_volume(),
                        {
                            "name": "config",
                            "configMap": {"name": kube_name(names.prefix, "config")},
                        },
                    ],
                    **pod_placement,
                },
            },
        },
    }
