"""The one base model of the experiment API: strict, camelCase on the wire."""

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["MAX_INT", "ApiModel", "SpecModel"]

MAX_INT = 2**53
"""The largest integer the API server checks exactly: it compares bounds as float64 (a
`maximum` of 2^63-1 wraps to -2^63 there), and JSON tools round beyond 2^53 anyway."""


class ApiModel(BaseModel):
    """Base of every API model.

    `extra="forbid"` because a misspelled key in a YAML file must fail loudly instead of
    being dropped; camelCase aliases because Kubernetes resources are camelCase, while the
    Python side stays snake_case.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=True,
        use_enum_values=True,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The resource form: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SpecModel(ApiModel):
    """Base of the spec's models: what a user writes, checked as strictly as the API server.

    Strict types because the CRD refuses `replicas: "4"` or `port: true`, so a file must not
    run locally with them either; no infinity or NaN because JSON cannot carry them to the
    cluster and a rate or a time scale of `.inf` would never end."""

    model_config = ApiModel.model_config | ConfigDict(strict=True, allow_inf_nan=False)
