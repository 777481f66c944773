"""vllm-router in front of one run's workers: a Deployment and its Service."""

from kvbench.api.routing import ROUTER_LIMITS, ROUTER_REQUESTS, RouterArm
from kvbench.kube.manifests.common import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    POD_ENV,
    ExperimentRef,
    Manifest,
    container_security,
    gpu_free_affinity,
    pod_security,
    resources,
    tmp_mount,
    tmp_volume,
)
from kvbench.runner.cluster.base import ChildNames
from kvbench.runner.cluster.kv_events import KvEventFeed, router_log_filter

ROUTER_IMAGE = "ghcr.io/kvbench/kvbench-router:0.1.17"
"""The router arms' default image: the project Dockerfile's `router` target, vllm-router's
Python launcher from the pinned wheel (whose version it is tagged with). Not upstream's
`vllm/vllm-router`, whose Rust binary has no kv_aware policy (docs/operator.md, "Router
image")."""

ROUTER_PROBE = {
    "httpGet": {"path": "/liveness", "port": 8000},
    "periodSeconds": 2,
    "timeoutSeconds": 10,
    "failureThreshold": 10,
}
"""Ready while the router process answers. Not /health: vllm-router answers 503 there as soon
as its own checker counts one worker unhealthy (a saturated one misses its 5 s), and a NotReady
router leaves its Service in the middle of a window. It listens only once a worker is healthy,
so Ready still means it can route."""


def router_objects(
    exp: ExperimentRef,
    arm: RouterArm,
    names: ChildNames,
    worker_urls: list[str],
    kv_events: KvEventFeed | None = None,
) -> list[Manifest]:
    """A Deployment and Service for vllm-router in front of this run's workers; a kv_aware
    one subscribes to `kv_events` and logs every batch it receives (`check_arm` counts them)."""
    image = arm.image or ROUTER_IMAGE
    args = ["--host", "$(POD_IP)", "--port", "8000", "--policy", arm.policy]
    args += ["--prometheus-host", "$(POD_IP)", "--prometheus-port", "29000"]
    args += ["--worker-urls", *worker_urls]
    # A read-only root: HOME where the router may write.
    env = [*POD_ENV, {"name": "HOME", "value": "/tmp"}]
    if kv_events is not None:
        args += kv_events.router_args()
        env.append({"name": "RUST_LOG", "value": router_log_filter(arm.extra_args)})
    args += list(arm.extra_args)
    extra = {LABEL_RUN: str(names.index), LABEL_ATTEMPT: str(names.attempt)}
    selector = {**exp.selector("router"), LABEL_RUN: str(names.index)}
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
                                "env": env,
                                "ports": [{"name": "http", "containerPort": 8000}],
                                "readinessProbe": ROUTER_PROBE,
                                "resources": resources(
                                    arm.resources.with_defaults(ROUTER_REQUESTS, ROUTER_LIMITS)
                                ),
                                "securityContext": container_security(read_only_root=True),
                                "volumeMounts": [tmp_mount()],
                            }
                        ],
                        "volumes": [tmp_volume()],
                        # Off GPU nodes: it must not take CPU from the servers it measures.
                        "affinity": gpu_free_affinity(None),
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
