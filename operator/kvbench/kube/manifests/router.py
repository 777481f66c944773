"""vllm-router in front of one run's workers: a Deployment and its Service."""

from kvbench.api.routing import RouterArm
from kvbench.kube.manifests.common import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    POD_ENV,
    ExperimentRef,
    Manifest,
    container_security,
    pod_security,
    tmp_mount,
    tmp_volume,
)
from kvbench.runner.cluster.base import ChildNames


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
                        "securityContext": pod_security(),
                        "containers": [
                            {
                                "name": "router",
                                "image": image,
                                "command": ["vllm-router"],
                                "args": args,
                                # A read-only root: HOME where the router may write.
                                "env": [*POD_ENV, {"name": "HOME", "value": "/tmp"}],
                                "ports": [{"name": "http", "containerPort": 8000}],
                                "readinessProbe": probe,
                                "securityContext": container_security(read_only_root=True),
                                "volumeMounts": [tmp_mount()],
                            }
                        ],
                        "volumes": [tmp_volume()],
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
