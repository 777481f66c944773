"""The load generator of one run attempt: its config, result ConfigMaps, access, and Job."""

from kvbench.api import ExperimentSpec
from kvbench.api.execution import LOADGEN_REQUESTS
from kvbench.kube.manifests.common import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    ExperimentRef,
    Manifest,
    container_security,
    gpu_free_affinity,
    kube_name,
    placement,
    pod_security,
    resources,
    tmp_mount,
    tmp_volume,
)
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.workload.trace_source import TRACE_MOUNT
from kvbench.runner.cluster.base import ChildNames


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
    """The attempt's Job: `kvbench loadgen` on a GPU-less node (the client must not compete
    with the servers it measures, whatever placement the spec adds), its result written into
    the result ConfigMaps the moment it ends, whoever watches. A trace workload's ConfigMap
    is mounted where the load generator reads it (`TRACE_MOUNT`)."""
    generator = spec.load_generator
    trace = spec.workload.trace
    traces = (
        [{"name": "trace", "configMap": {"name": trace.config_map.name}}]
        if trace is not None and trace.config_map is not None
        else []
    )
    pod_placement = placement(generator)
    pod_placement["affinity"] = gpu_free_affinity(generator.affinity)
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
                    "securityContext": pod_security(),
                    "containers": [
                        {
                            "name": "loadgen",
                            "image": generator.image or exp.image,
                            "command": ["kvbench", "loadgen"],
                            "args": ["--config", "/config/run.json", "--out-configmaps", out],
                            "env": [
                                {
                                    "name": "POD_UID",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
                                }
                            ],
                            "resources": resources(
                                generator.resources.with_defaults(LOADGEN_REQUESTS)
                            ),
                            "securityContext": container_security(read_only_root=True),
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/config", "readOnly": True},
                                tmp_mount(),
                                *(
                                    {"name": v["name"], "mountPath": TRACE_MOUNT, "readOnly": True}
                                    for v in traces
                                ),
                            ],
                        }
                    ],
                    "volumes": [
                        tmp_volume(),
                        {
                            "name": "config",
                            "configMap": {"name": kube_name(names.prefix, "config")},
                        },
                        *traces,
                    ],
                    **pod_placement,
                },
            },
        },
    }
