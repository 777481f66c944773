"""Published measurements an experiment reproduces, read from files shipped with the examples.

An experiment names the measurement in its metadata (`kvbench.io/reproduces: ID`); the figures
live in `examples/references/ID.yaml`, not in code, so a new article or a corrected figure is
a file to add, never a release. An annotation, not a spec field, because the reference changes
what the report prints, not what is measured: the spec (and the results store's identity)
stays the same.
"""

from pathlib import Path

import yaml
from pydantic import Field, ValidationError

import kvbench
from kvbench.api import REPRODUCES
from kvbench.api.base import SpecModel

__all__ = [
    "REPRODUCES",
    "PublishedConditions",
    "PublishedPoint",
    "Reference",
    "ReferenceError",
    "default_reference_dirs",
    "find_reference",
    "load_reference",
]

_MAX_BYTES = 1 << 20


class ReferenceError(ValueError):
    """A reference that cannot be found or read."""


class PublishedConditions(SpecModel):
    """What the published measurement ran, in the words of its source."""

    model: str
    engine: str | None = Field(None, description="Engine and version, e.g. vLLM 0.31.0")
    hardware: str | None = None
    workers: int | None = Field(None, ge=1)
    kv_cache_tokens: int | None = Field(None, ge=1, description="KV cache tokens per worker")
    notes: str | None = None


class PublishedPoint(SpecModel):
    """The published figures of one point; a figure left out was not published."""

    concurrency: int = Field(..., ge=1)
    prefixes: int | None = Field(None, ge=1)
    variant: str | None = Field(None, description="Only this variant (default: every one)")
    arm: str | None = Field(None, description="Only this routing arm (default: every one)")
    request_hit_rate: float | None = Field(None, ge=0, le=1)
    ttft_p50: float | None = Field(None, ge=0, description="Seconds")
    ttft_p99: float | None = Field(None, ge=0, description="Seconds")
    requests_per_second: float | None = Field(None, ge=0)
    output_tokens_per_second: float | None = Field(None, ge=0)
    preemptions: float | None = Field(None, ge=0, description="Per run")
    itl_max: float | None = Field(None, ge=0, description="Seconds")
    kv_cache_tokens: int | None = Field(None, ge=1, description="Per worker")


class Reference(SpecModel):
    """One published measurement: where it comes from, what it ran, its figures."""

    id: str = Field(..., min_length=1, max_length=128)
    source: str = Field(..., min_length=1, description="Article and section")
    conditions: PublishedConditions
    points: list[PublishedPoint] = Field(..., min_length=1)


def default_reference_dirs() -> list[Path]:
    """Where reference IDs are looked up: ./examples/references, then the one of the
    checkout kvbench runs from (an editable install)."""
    checkout = Path(kvbench.__file__).resolve().parents[2] / "examples" / "references"
    return list(dict.fromkeys([Path.cwd() / "examples" / "references", checkout]))


def find_reference(name: str, dirs: list[Path]) -> Path:
    """The file of `name`: a path to a YAML file, or an ID looked up as `<dir>/<ID>.yaml`."""
    direct = Path(name)
    if direct.suffix in (".yaml", ".yml") and direct.is_file():
        return direct
    for folder in dirs:
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(d) for d in dirs) or "nowhere"
    raise ReferenceError(
        f"reference {name!r}: no file {name}.yaml in {looked} (pass --reference FILE)"
    )


def load_reference(path: Path) -> Reference:
    """The reference in `path`, checked as strictly as an experiment file."""
    if path.stat().st_size > _MAX_BYTES:
        raise ReferenceError(f"{path}: larger than {_MAX_BYTES} bytes; not a reference file")
    try:
        return Reference.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, UnicodeDecodeError, ValidationError) as err:
        raise ReferenceError(f"{path}: {err}") from None
