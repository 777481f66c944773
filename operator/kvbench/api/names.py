"""The string shapes Kubernetes and container runtimes accept, checked at admission.

Each is a pattern the CRD carries (so the API server refuses a bad value up front) and
pydantic checks (so `kvbench run` and the operator refuse it the same way). Patterns are
written for Go's RE2, Rust's regex and Python's re alike: ASCII classes only, no lookaround.
"""

import re
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = [
    "ARG_TEXT",
    "CONFIG_KEY",
    "DNS_SUBDOMAIN",
    "IMAGE_PATTERN",
    "LABEL_KEY",
    "LABEL_VALUE",
    "NO_NUL",
    "Arg",
    "ConfigKey",
    "DnsSubdomain",
    "ImageRef",
    "LabelKey",
    "LabelValue",
    "LiteralArg",
    "VolumePath",
]

_DNS_PART = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"^{_DNS_PART}(\.{_DNS_PART})*$"
"""Secret, ConfigMap and claim names (RFC 1123 subdomain, at most 253 characters)."""

CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret or ConfigMap."""

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({_DNS_PART}(\.{_DNS_PART})*/)?{_LABEL_NAME}$"
"""A label key: an optional DNS prefix and `/`, then a name of at most 63 characters."""

LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
"""A label value: empty, or at most 63 characters."""

_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_HOST_PART = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"((localhost|{_HOST_PART}(\.{_HOST_PART})+)(:[0-9]+)?|{_HOST_PART}:[0-9]+)"
IMAGE_PATTERN = (
    rf"^({_REGISTRY}/)?{_PATH}(/{_PATH})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}))?$"
)
"""A container image reference as the distribution grammar has it: a registry only when it
looks like a host (a dot, a port or `localhost`), a lowercase repository, a tag of at most 128
characters, and a digest whose hex has its algorithm's length."""

NO_NUL = r"^[^\x00]*$"
"""No NUL: an environment value is a C string once it reaches execve."""

ARG_TEXT = r"^([^$\x00]|\$[^($\x00])*\$?$"
"""No NUL, and no `$(` or `$$`: the kubelet expands those in container arguments."""


def _matching(pattern: str, what: str) -> AfterValidator:
    """A pattern checked with a message that says what was expected (the CRD carries the
    pattern itself; pydantic's own message would quote the whole regex)."""
    compiled = re.compile(pattern.removesuffix("$") + r"\Z")

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value[:80]!r} is not {what}")
        return value

    return AfterValidator(check)


def _literal(value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{value[:80]!r}: an argument cannot hold NUL")
    if "$(" in value or "$$" in value:
        raise ValueError(
            f"{value[:80]!r}: `$(` and `$$` are Kubernetes variable references in container "
            "arguments (the kubelet would replace `$(HF_TOKEN)` with the secret); kvbench "
            "passes arguments literally, so they cannot hold them"
        )
    return value


def _no_dot_dot(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value[:80]!r}: a volume path must not contain '..'")
    return value


DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)]
ConfigKey = Annotated[str, Field(pattern=CONFIG_KEY, max_length=253)]
_LABEL_WORDS = "up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric"
LabelKey = Annotated[
    str,
    Field(max_length=317, json_schema_extra={"pattern": LABEL_KEY}),
    _matching(LABEL_KEY, f"a label key (an optional DNS prefix and '/', then {_LABEL_WORDS})"),
]
LabelValue = Annotated[
    str,
    Field(max_length=63, json_schema_extra={"pattern": LABEL_VALUE}),
    _matching(LABEL_VALUE, f"a label value ({_LABEL_WORDS})"),
]
ImageRef = Annotated[
    str,
    Field(max_length=255, json_schema_extra={"pattern": IMAGE_PATTERN}),
    _matching(
        IMAGE_PATTERN,
        "a container image reference ([registry/]repository[:tag][@sha256:<64 hex digits>], "
        "the repository in lowercase)",
    ),
]
LiteralArg = Annotated[
    str, Field(json_schema_extra={"pattern": ARG_TEXT}), AfterValidator(_literal)
]
"""Text that reaches a container's command line as it is written (bound its length where
it is used)."""
Arg = Annotated[LiteralArg, Field(max_length=4096)]
"""One argument of a container's command line."""
VolumePath = Annotated[
    str, Field(pattern=r"^/[^\x00-\x1f]*$", max_length=1024), AfterValidator(_no_dot_dot)
]
"""An absolute path without control characters or `..`."""
