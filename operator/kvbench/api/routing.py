"""Routing arms: how the load reaches the workers. Arms are compared on identical traffic."""

from typing import Literal

from pydantic import Field, model_validator

from kvbench.api.base import ApiModel
from kvbench.api.kube import DNS_LABEL

__all__ = [
    "ARM_KINDS",
    "ExternalArm",
    "PrefixAffinityArm",
    "RouterArm",
    "RoutingArm",
    "ServiceArm",
]

RouterPolicy = Literal[
    "cache_aware", "kv_aware", "consistent_hash", "round_robin", "random", "power_of_two"
]
ARM_KINDS = ("service", "router", "external", "prefix_affinity")
# Router policies that read the prompt's text, so token-id prompts would defeat them.
TEXT_POLICIES = frozenset({"cache_aware", "consistent_hash", "kv_aware"})


class ServiceArm(ApiModel):
    """Plain Kubernetes load balancing: a ClusterIP Service picks a pod per connection."""


class RouterArm(ApiModel):
    """A router the operator deploys in front of the workers."""

    implementation: Literal["vllm-router", "sglang-router"] = "vllm-router"
    image: str | None = Field(None, min_length=1, description="Router image (default per kind)")
    policy: RouterPolicy = "cache_aware"
    extra_args: list[str] = Field(default_factory=list)


class ExternalArm(ApiModel):
    """A front end someone else runs (e.g. a Dynamo frontend) and the pods behind it."""

    url: str = Field(..., pattern=r"^https?://[^\s/]+(/.*)?$", description="Base URL")
    pod_selector: dict[str, str] = Field(
        ..., min_length=1, description="Labels of the worker pods whose counters are read"
    )
    metrics_port: int = Field(8000, ge=1, le=65535)


class PrefixAffinityArm(ApiModel):
    """The load generator sends each prefix group straight to one pod (consistent hashing):
    the upper bound of what KV-aware routing can reach."""


class RoutingArm(ApiModel):
    """One arm of the comparison: a name and exactly one way of routing."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "oneOf": [
                {"required": ["service"]},
                {"required": ["router"]},
                {"required": ["external"]},
                {"required": ["prefixAffinity"]},
            ],
        }
    }

    name: str = Field(..., pattern=DNS_LABEL)
    service: ServiceArm | None = None
    router: RouterArm | None = None
    external: ExternalArm | None = None
    prefix_affinity: PrefixAffinityArm | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "RoutingArm":
        chosen = [kind for kind in ARM_KINDS if getattr(self, kind) is not None]
        if len(chosen) != 1:
            raise ValueError(
                f"routing arm {self.name!r} needs exactly one of service, router, external, "
                f"prefixAffinity (found {len(chosen) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        """Which routing this arm uses: service, router, external or prefix_affinity."""
        return next(kind for kind in ARM_KINDS if getattr(self, kind) is not None)
