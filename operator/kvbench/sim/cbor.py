"""Canonical CBOR (RFC 8949 core deterministic encoding) for the values block hashes use.

vLLM's ``sha256_cbor`` hashes ``cbor2.dumps(value, canonical=True)``. cbor2 is not a
kvbench dependency, and block hashing only ever encodes ``None``, booleans, integers
below 2**64 in magnitude, ``bytes``, ``str`` and tuples or lists of those, so this
module encodes exactly that subset, byte for byte as cbor2 does (shortest-form
heads, definite lengths), and refuses anything else rather than guess.
``tests/unit/sim/test_sim_hashing.py`` checks it against bytes cbor2 6.2.1 produced.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dumps_canonical"]

_UINT, _NEGINT, _BYTES, _TEXT, _ARRAY = 0, 1, 2, 3, 4
_SIMPLE = {None: b"\xf6", False: b"\xf4", True: b"\xf5"}
_small_ints: dict[int, bytes] = {}


def _head(major: int, value: int) -> bytes:
    """The initial byte(s) of an item: major type plus the shortest argument encoding."""
    lead = major << 5
    if value < 24:
        return bytes((lead | value,))
    if value < 0x100:
        return bytes((lead | 24, value))
    if value < 0x10000:
        return bytes((lead | 25,)) + value.to_bytes(2, "big")
    if value < 0x100000000:
        return bytes((lead | 26,)) + value.to_bytes(4, "big")
    if value < 0x10000000000000000:
        return bytes((lead | 27,)) + value.to_bytes(8, "big")
    raise ValueError(f"integer out of CBOR's 64-bit range: {value}")


def _int(value: int) -> bytes:
    encoded = _small_ints.get(value)
    if encoded is None:
        encoded = _head(_UINT, value) if value >= 0 else _head(_NEGINT, -1 - value)
        if -(1 << 20) < value < 1 << 20:
            _small_ints[value] = encoded
    return encoded


def _encode(value: Any, out: list[bytes]) -> None:
    if value is None or value is True or value is False:
        out.append(_SIMPLE[value])
    elif type(value) is int:
        out.append(_int(value))
    elif isinstance(value, bytes):
        out.append(_head(_BYTES, len(value)))
        out.append(value)
    elif isinstance(value, str):
        data = value.encode("utf-8")
        out.append(_head(_TEXT, len(data)))
        out.append(data)
    elif isinstance(value, tuple | list):
        out.append(_head(_ARRAY, len(value)))
        for item in value:
            if type(item) is int:
                out.append(_int(item))
            else:
                _encode(item, out)
    else:
        raise TypeError(f"cannot CBOR-encode {type(value).__name__} for a block hash")


def dumps_canonical(value: Any) -> bytes:
    """``cbor2.dumps(value, canonical=True)`` for the supported subset."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)
