"""Kubernetes quantities and Go-style durations, validated by pattern and parsed to numbers."""

import re
from decimal import Decimal
from math import isfinite
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

__all__ = [
    "DURATION_PATTERN",
    "MAX_BYTES",
    "MAX_DURATION_SECONDS",
    "QUANTITY_PATTERN",
    "ByteSize",
    "Duration",
    "Quantity",
    "parse_duration",
    "parse_quantity",
]

QUANTITY_PATTERN = r"^(\+?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
"""Never negative: no resource, size or count kvbench reads can be below zero."""
MAX_BYTES = 2**60
"""An exbibyte: more than any GPU or volume, far below the int64 the CRD stores."""
MAX_DURATION_SECONDS = 30 * 24 * 3600.0
"""Thirty days: longer than any benchmark run, and inside a probe's int32 threshold."""
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
_QUANTITY = re.compile(
    r"^(\+?[0-9]*\.?[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][-+]?[0-9]{1,3})?$"
)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _shown(value: object) -> str:
    """A value for a message: short, and never str() of an int Python will not print."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit number"
    return repr(value if not isinstance(value, str) else value[:40])


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity ("1Gi", "500m", "2e3", 1073741824) as a Decimal; never negative,
    infinite or with an exponent beyond three digits (Decimal would overflow)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("a quantity is a number or a string such as '1Gi'")
    if isinstance(value, int | float):
        if value < 0 or (isinstance(value, float) and not isfinite(value)):
            raise ValueError(f"{_shown(value)} is not a finite, non-negative quantity")
        return Decimal(value) if isinstance(value, int) else Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(
            f"{_shown(value)} is not a non-negative Kubernetes quantity "
            "(examples: 1Gi, 500M, 1073741824)"
        )
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number) * Decimal(10) ** int(suffix[1:])
    return Decimal(number) * Decimal(_SUFFIXES[suffix])


def parse_duration(value: str | int | float) -> float:
    """A Go duration ("90s", "1h30m", "250ms") or a number of seconds, in seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("a duration is a string such as '90s' or a number of seconds")
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(DURATION_PATTERN, text):
            raise ValueError(
                f"{_shown(value)} is not a duration (examples: 90s, 10m, 1h30m, 250ms)"
            )
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    else:
        seconds = float(value) if abs(value) <= MAX_DURATION_SECONDS else float("inf")
        if value < 0:
            raise ValueError("a duration cannot be negative")
    if not seconds <= MAX_DURATION_SECONDS:
        raise ValueError(f"{_shown(value)} is longer than 30 days")
    return seconds


def _check_quantity(value: Any) -> str | int:
    if parse_quantity(value) >= 2**63:
        raise ValueError(f"{_shown(value)} is beyond what Kubernetes counts (2^63)")
    return value if isinstance(value, int) else str(value)


def _check_byte_size(value: Any) -> int:
    amount = parse_quantity(value)
    if amount != amount.to_integral_value() or not 0 < amount <= MAX_BYTES:
        raise ValueError(f"{_shown(value)} is not a whole number of bytes from 1 to 2^60")
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
