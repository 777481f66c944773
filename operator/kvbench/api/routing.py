"""Routing arms: how the load reaches the workers. Arms are compared on identical traffic."""

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvbench.api.base import SpecModel
from kvbench.api.kube import DNS_LABEL, Resources
from kvbench.api.names import Arg, ImageRef, LabelKey, LabelValue

__all__ = [
    "ARM_KINDS",
    "ROUTER_LIMITS",
    "ROUTER_REQUESTS",
    "DynamoArm",
    "ExternalArm",
    "PrefixAffinityArm",
    "RouterArm",
    "RoutingArm",
    "ServiceArm",
    "SessionAffinityArm",
]

RouterPolicy = Literal[
    "cache_aware", "kv_aware", "consistent_hash", "round_robin", "random", "power_of_two"
]
ARM_KINDS = ("service", "router", "external", "prefix_affinity", "session_affinity", "dynamo")
# Router policies that read the prompt's text, so token-id prompts would defeat them.
TEXT_POLICIES = frozenset({"cache_aware", "consistent_hash", "kv_aware"})
_ROUTER_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--policy",
        "--worker-urls",
        "--prometheus-host",
        "--prometheus-port",
        "--kv-event-source",
        "--kv-event-block-size",
        "--kv-event-model",
    }
)


ROUTER_REQUESTS = {"cpu": "1", "memory": "1Gi"}
"""The router's requests where the arm names neither: a router starved of CPU would be the
latency measured (production-stack requests 400m and 1000Mi for a router that does less)."""
ROUTER_LIMITS = {"memory": "4Gi"}
"""A memory limit only (a CPU limit would throttle it): its prefix tree is bounded."""


class ServiceArm(SpecModel):
    """Plain Kubernetes load balancing: a ClusterIP Service picks a pod per connection."""


class RouterArm(SpecModel):
    """A router the operator deploys in front of the workers."""

    implementation: Literal["vllm-router", "sglang-router"] = "vllm-router"
    image: ImageRef | None = Field(None, description="Router image (default per kind)")
    policy: RouterPolicy = "cache_aware"
    extra_args: list[Arg] = Field(
        default_factory=list,
        max_length=256,
        description="More router arguments (never one kvbench sets: the address, policy, "
        "workers, metrics and KV event sources)",
    )
    resources: Resources = Field(
        default_factory=Resources,
        description="The router container's resources. CPU and memory named in neither "
        "requests nor limits default to requests of 1 CPU and 1Gi and a 4Gi memory limit",
    )

    @field_validator("extra_args")
    @classmethod
    def _not_own_flags(cls, args: list[str]) -> list[str]:
        for i, arg in enumerate(args):
            flag = arg.split("=", 1)[0]
            if flag in _ROUTER_FLAGS:
                raise ValueError(f"[{i}] {flag}: kvbench sets it for the router itself")
        return args


class ExternalArm(SpecModel):
    """A front end someone else runs (e.g. a Dynamo frontend) and the pods behind it."""

    url: str = Field(
        ..., pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=2048, description="Base URL"
    )
    pod_selector: dict[LabelKey, LabelValue] = Field(
        ..., min_length=1, description="Labels of the worker pods whose counters are read"
    )
    metrics_port: int = Field(8000, ge=1, le=65535)


class PrefixAffinityArm(SpecModel):
    """The load generator sends each prefix group straight to one pod (consistent hashing):
    the upper bound of what KV-aware routing can reach."""


class SessionAffinityArm(SpecModel):
    """The load generator sends every turn of a conversation to one pod, as a gateway keyed on
    a session header does (what Gateway API inference extension users ask for): each
    conversation's history stays where it was cached. Conversations are spread with bounded
    loads, as prefix affinity spreads prefixes."""


class DynamoArm(SpecModel):
    """NVIDIA Dynamo's OpenAI frontend with a router mode, in front of workers Dynamo runs:
    `dynamo.vllm` on GPU clusters, `dynamo.mocker` (its GPU-less engine) locally and on
    clusters without GPUs. The workers get the engine's KV cache size and block size.

    The KV router picks the worker with the lowest cost
    `prefillLoadScale x (prompt blocks - overlapScoreCredit x cached blocks) + decode blocks`;
    unset weights keep Dynamo's defaults.
    """

    router_mode: Literal["kv", "random", "round-robin"] = "kv"
    overlap_score_credit: float | None = Field(None, ge=0, description="kv mode only")
    prefill_load_scale: float | None = Field(None, ge=0, description="kv mode only")
    temperature: float | None = Field(
        None, ge=0, description="kv mode only: softmax sampling temperature (0: deterministic)"
    )
    kv_events: bool | None = Field(
        None, description="kv mode only; false: predict caches from routing decisions"
    )
    image: ImageRef | None = Field(
        None, description="Dynamo runtime image on clusters (default per release)"
    )


class RoutingArm(SpecModel):
    """One arm of the comparison: a name and exactly one way of routing."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "oneOf": [
                {"required": ["service"]},
                {"required": ["router"]},
                {"required": ["external"]},
                {"required": ["prefixAffinity"]},
                {"required": ["sessionAffinity"]},
                {"required": ["dynamo"]},
            ],
        }
    }

    name: str = Field(..., pattern=DNS_LABEL)
    service: ServiceArm | None = None
    router: RouterArm | None = None
    external: ExternalArm | None = None
    prefix_affinity: PrefixAffinityArm | None = None
    session_affinity: SessionAffinityArm | None = None
    dynamo: DynamoArm | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "RoutingArm":
        chosen = [kind for kind in ARM_KINDS if getattr(self, kind) is not None]
        if len(chosen) != 1:
            raise ValueError(
                f"routing arm {self.name!r} needs exactly one of service, router, external, "
                f"prefixAffinity, sessionAffinity, dynamo (found {len(chosen) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        """Which routing this arm uses: service, router, external, prefix_affinity,
        session_affinity, dynamo."""
        return next(kind for kind in ARM_KINDS if getattr(self, kind) is not None)

    @property
    def worker_kind(self) -> str:
        """Which workers the arm needs: Dynamo's own (`dynamo`), someone else's behind an
        external URL (`external`), or the experiment's vLLM pods (`vllm`)."""
        if self.dynamo is not None:
            return "dynamo"
        return "external" if self.external is not None else "vllm"

    @property
    def affinity(self) -> bool:
        """The load generator itself picks the pod (prefix or session affinity)."""
        return self.prefix_affinity is not None or self.session_affinity is not None
