"""Kubernetes quantities and Go-style durations, validated by pattern and parsed to numbers."""

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

__all__ = [
    "DURATION_PATTERN",
    "QUANTITY_PATTERN",
    "ByteSize",
    "Duration",
    "Quantity",
    "parse_duration",
    "parse_quantity",
]

QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"

_SUFFIXES = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9]*\.?[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][-+]?[0-9]+)?$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity ("1Gi", "500m", "2e3", 1073741824) as a Decimal."""
    if isinstance(value, bool):
        raise ValueError("a quantity is a number or a string such as '1Gi', not a boolean")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity (examples: 1Gi, 500M, 1073741824)"
        )
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number) * Decimal(10) ** int(suffix[1:])
    return Decimal(number) * Decimal(_SUFFIXES[suffix])


def parse_duration(value: str | int | float) -> float:
    """A Go duration ("90s", "1h30m", "250ms") or a number of seconds, in seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string such as '90s', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    text = value.strip()
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 10m, 1h30m, 250ms)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def _check_quantity(value: Any) -> str | int:
    parse_quantity(value)
    return value if isinstance(value, int) else str(value)


def _check_byte_size(value: Any) -> int:
    amount = parse_quantity(value)
    if amount != amount.to_integral_value() or amount <= 0:
        raise ValueError(f"{value!r} is not a whole positive number of bytes")
    return int(amount)


def _check_duration(value: Any) -> str:
    seconds = parse_duration(value)
    return value if isinstance(value, str) else f"{seconds:g}s"


Quantity = Annotated[
    str | int,
    BeforeValidator(_check_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]
"""A resource quantity kept as written ("1Gi", "500m", 4); validated on input."""

ByteSize = Annotated[
    int,
    BeforeValidator(_check_byte_size),
    PlainSerializer(lambda v: v, return_type=int),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]
"""A byte count given as an integer or a quantity ("1Gi"); stored as an integer."""

Duration = Annotated[
    str,
    BeforeValidator(_check_duration),
    Field(json_schema_extra={"pattern": DURATION_PATTERN}),
]
"""A Go-style duration kept as written ("10m"); `parse_duration` gives seconds."""
