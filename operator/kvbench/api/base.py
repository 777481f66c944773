"""The one base model of the experiment API: strict, camelCase on the wire."""

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["ApiModel"]


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
