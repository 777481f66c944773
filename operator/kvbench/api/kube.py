"""Small Kubernetes shapes the spec reuses: env vars, tolerations, resources, volumes."""

from typing import Any, Literal

from pydantic import Field, model_validator

from kvbench.api.base import ApiModel
from kvbench.api.units import ByteSize, Quantity

__all__ = [
    "DNS_LABEL",
    "ConfigMapKeyRef",
    "EnvVar",
    "EnvVarSource",
    "ModelCache",
    "Placement",
    "Resources",
    "SecretKeyRef",
    "Toleration",
]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
"""Names that become part of pod and job names: short DNS labels."""


class SecretKeyRef(ApiModel):
    """A key of a Secret in the experiment's namespace."""

    name: str = Field(..., min_length=1)
    key: str = Field("token", min_length=1)


class ConfigMapKeyRef(ApiModel):
    """A key of a ConfigMap in the experiment's namespace."""

    name: str = Field(..., min_length=1)
    key: str = Field(..., min_length=1)


class EnvVarSource(ApiModel):
    """Where an env var's value comes from (one of the two)."""

    secret_key_ref: SecretKeyRef | None = None
    config_map_key_ref: ConfigMapKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "EnvVarSource":
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("valueFrom takes exactly one of secretKeyRef or configMapKeyRef")
        return self


class EnvVar(ApiModel):
    """An environment variable, as in a container spec."""

    name: str = Field(..., pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _value_or_source(self) -> "EnvVar":
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


class Toleration(ApiModel):
    """A pod toleration."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=0)


class Resources(ApiModel):
    """Container resources, e.g. limits {nvidia.com/gpu: 1}."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class Placement(ApiModel):
    """Where pods go: node selector, tolerations, affinity (as in a pod spec)."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: dict[str, Any] | None = Field(
        None, description="A pod affinity block, passed to the pod spec as written"
    )


class ModelCache(ApiModel):
    """A volume for model weights: a PersistentVolumeClaim, a host path or an emptyDir."""

    mount_path: str = Field("/root/.cache/huggingface", pattern=r"^/")
    persistent_volume_claim: str | None = Field(None, min_length=1, description="Claim name")
    host_path: str | None = Field(None, pattern=r"^/")
    empty_dir_size_limit: ByteSize | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "ModelCache":
        sources = [self.persistent_volume_claim, self.host_path, self.empty_dir_size_limit]
        if sum(s is not None for s in sources) != 1:
            raise ValueError(
                "modelCache takes exactly one of persistentVolumeClaim, hostPath or "
                "emptyDirSizeLimit"
            )
        return self
