"""A pod's affinity block, checked against the shape and rules the API server applies.

The spec keeps it as the mapping the user wrote (it goes to the pod spec as it is), but every
key, operator and value is checked here first: a misspelled key or a selector the API server
refuses would otherwise pass admission and fail each StatefulSet or Job it reaches."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, WithJsonSchema, model_validator

from kvbench.api.base import SpecModel
from kvbench.api.names import DNS_SUBDOMAIN, LabelKey, LabelValue

__all__ = ["Affinity", "AffinityBlock"]


class _Requirement(SpecModel):
    key: LabelKey
    values: list[str] = Field(default_factory=list, max_length=256)

    def _check(self, operator: str) -> None:
        if operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {operator} takes no values")
        if operator in ("Gt", "Lt") and (len(self.values) != 1 or not self.values[0].isdigit()):
            raise ValueError(f"operator {operator} takes one whole number")


class LabelSelectorRequirement(_Requirement):
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _values_fit(self) -> "LabelSelectorRequirement":
        self._check(self.operator)
        return self


class NodeSelectorRequirement(_Requirement):
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]

    @model_validator(mode="after")
    def _values_fit(self) -> "NodeSelectorRequirement":
        self._check(self.operator)
        return self


class LabelSelector(SpecModel):
    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=64)


class NodeSelectorTerm(SpecModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list, max_length=64)


class NodeSelector(SpecModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(..., min_length=1, max_length=64)


class PreferredSchedulingTerm(SpecModel):
    weight: int = Field(..., ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=64
    )


class PodAffinityTerm(SpecModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: list[Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=63)]] = Field(
        default_factory=list, max_length=64
    )
    topology_key: LabelKey


class WeightedPodAffinityTerm(SpecModel):
    weight: int = Field(..., ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list, max_length=64
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list, max_length=64
    )


class AffinityBlock(SpecModel):
    """A pod spec's `affinity`."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


def _path(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _check(value: dict[str, Any]) -> dict[str, Any]:
    try:
        AffinityBlock.model_validate(value)
    except ValidationError as err:
        first = err.errors()[0]
        where = _path(first["loc"]) or "(affinity)"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise ValueError(f"{where}: {first['msg'].removeprefix('Value error, ')}{more}") from None
    return value


Affinity = Annotated[
    dict[str, Any],
    AfterValidator(_check),
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""An affinity block kept as written, validated as `AffinityBlock`."""
