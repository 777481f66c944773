"""Small Kubernetes shapes the spec reuses: env vars, tolerations, resources, volumes.

Each carries the checks the API server applies to the pod it ends up in, so a spec that would
make a StatefulSet or Job refused is refused itself, naming its own field."""

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kvbench.api.affinity import Affinity
from kvbench.api.base import MAX_INT, SpecModel
from kvbench.api.names import (
    NO_NUL,
    ConfigKey,
    DnsSubdomain,
    LabelKey,
    LabelValue,
    VolumePath,
)
from kvbench.api.units import ByteSize, Quantity, parse_quantity

__all__ = [
    "DNS_LABEL",
    "ConfigMapKeyRef",
    "EnvVar",
    "EnvVarSource",
    "ModelCache",
    "PerPodClaim",
    "Placement",
    "Resources",
    "SecretKeyRef",
    "Toleration",
]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
"""Names that become part of pod and job names: short DNS labels."""

_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
"""Resources the scheduler may overcommit; every other (extended) one is whole and exact."""


class SecretKeyRef(SpecModel):
    """A key of a Secret in the experiment's namespace."""

    name: DnsSubdomain
    key: ConfigKey = "token"


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the experiment's namespace."""

    name: DnsSubdomain
    key: ConfigKey


class EnvVarSource(SpecModel):
    """Where an env var's value comes from (one of the two)."""

    secret_key_ref: SecretKeyRef | None = None
    config_map_key_ref: ConfigMapKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "EnvVarSource":
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("valueFrom takes exactly one of secretKeyRef or configMapKeyRef")
        return self


class EnvVar(SpecModel):
    """An environment variable, as in a container spec."""

    name: str = Field(..., pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=256)
    value: str | None = Field(None, pattern=NO_NUL, max_length=4096)
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _value_or_source(self) -> "EnvVar":
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


class Toleration(SpecModel):
    """A pod toleration, with the API server's rules on which fields go together."""

    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=0, le=MAX_INT)

    @model_validator(mode="after")
    def _consistent(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without key needs operator Exists (it matches all)")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self


class Resources(SpecModel):
    """Container resources, e.g. limits {nvidia.com/gpu: 1}.

    As the API server has it: a name is cpu, memory, ephemeral-storage or a qualified name
    such as nvidia.com/gpu (hugepages are not for inference servers); a request is at most its
    limit; an extended resource is a whole number and its request, if any, equals its limit."""

    requests: dict[LabelKey, Quantity] = Field(default_factory=dict, max_length=32)
    limits: dict[LabelKey, Quantity] = Field(default_factory=dict, max_length=32)

    @field_validator("requests", "limits")
    @classmethod
    def _known_names(cls, values: dict[str, Any]) -> dict[str, Any]:
        for name in values:
            if name not in _CONTAINER_RESOURCES and "/" not in name:
                raise ValueError(
                    f"{name[:80]!r}: a resource is cpu, memory, ephemeral-storage or a "
                    "qualified name such as nvidia.com/gpu"
                )
        return values

    @model_validator(mode="after")
    def _requests_fit_limits(self) -> "Resources":
        for name, amount in {**self.requests, **self.limits}.items():
            whole = parse_quantity(amount) == parse_quantity(amount).to_integral_value()
            if name not in _CONTAINER_RESOURCES and not whole:
                raise ValueError(f"{name}: an extended resource is a whole number")
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is None:
                if name not in _CONTAINER_RESOURCES:
                    raise ValueError(f"requests.{name}: an extended resource needs a limit")
                continue
            asked, allowed = parse_quantity(request), parse_quantity(limit)
            if asked > allowed:
                raise ValueError(f"requests.{name} ({request}) is above its limit ({limit})")
            if name not in _CONTAINER_RESOURCES and asked != allowed:
                raise ValueError(f"requests.{name}: an extended resource's request is its limit")
        return self

    def with_defaults(
        self, requests: dict[str, str], limits: dict[str, str] | None = None
    ) -> "Resources":
        """These resources, plus the default `requests` and `limits` of every resource the
        spec names in neither: a pod without requests is BestEffort (first evicted, least
        CPU under contention), and a default never contradicts what the user wrote."""
        named = {*self.requests, *self.limits}
        return Resources(
            requests={**{k: v for k, v in requests.items() if k not in named}, **self.requests},
            limits={**{k: v for k, v in (limits or {}).items() if k not in named}, **self.limits},
        )


class Placement(SpecModel):
    """Where pods go: node selector, tolerations, affinity (as in a pod spec)."""

    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    affinity: Affinity | None = Field(
        None,
        description="A pod affinity block, passed to the pod spec as written (the load "
        "generator's gets the rule that keeps it off GPU nodes added to each of its terms)",
    )


class PerPodClaim(SpecModel):
    """A claim of its own for every worker pod (a StatefulSet volumeClaimTemplate): works
    with ReadWriteOnce storage, each pod downloads the weights once into its claim."""

    size: ByteSize = Field(..., description="Storage each claim requests, e.g. 100Gi")
    storage_class_name: DnsSubdomain | None = Field(
        None, description="StorageClass of the claims (default: the cluster's default class)"
    )


_RESERVED_MOUNTS = {
    "/tmp": "the engine's own scratch volume (and HOME)",
    "/dev/shm": "the workers' shared memory",
}


class ModelCache(SpecModel):
    """A volume for model weights, mounted at `mountPath` with HF_HOME pointing at it: one
    existing claim every replica shares, a claim per pod, a host path or an emptyDir."""

    mount_path: VolumePath = Field(
        "/models",
        description="Where the cache is mounted, and HF_HOME; never under /root, which "
        "vLLM's image keeps at mode 0700 while the workers run as uid 10001",
    )
    persistent_volume_claim: DnsSubdomain | None = Field(
        None,
        description="An existing claim that every replica of every pool mounts: "
        "ReadWriteMany (or ReadOnlyMany, filled beforehand); a ReadWriteOnce claim fails "
        "with Multi-Attach as soon as two pods land on two nodes (use perPodClaim)",
    )
    per_pod_claim: PerPodClaim | None = Field(
        None, description="A new claim per worker pod, kept until the experiment is deleted"
    )
    host_path: VolumePath | None = None
    empty_dir_size_limit: ByteSize | None = None

    @field_validator("mount_path")
    @classmethod
    def _own_place(cls, value: str) -> str:
        path = "/" + value.strip("/")
        if path in _RESERVED_MOUNTS:
            raise ValueError(f"{path} is {_RESERVED_MOUNTS[path]}; mount the cache elsewhere")
        if path == "/root" or path.startswith("/root/"):
            raise ValueError(
                "/root is mode 0700 in vLLM's image and the workers run as uid 10001, which "
                "cannot reach it; mount the cache elsewhere (default /models)"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "ModelCache":
        sources = [
            self.persistent_volume_claim,
            self.per_pod_claim,
            self.host_path,
            self.empty_dir_size_limit,
        ]
        if sum(s is not None for s in sources) != 1:
            raise ValueError(
                "modelCache takes exactly one of persistentVolumeClaim, perPodClaim, hostPath "
                "or emptyDirSizeLimit"
            )
        return self
