"""A planner's sweep: one experiment file turned into one experiment per worker count, with the
KV sizes as engine variants, the prefix counts as the workload's points and the Service and
prefix-affinity arms, every one runnable in virtual time (`kvbench sweep`).

Workers are not a plan axis (a run's workers are the spec's pools), so each worker count is
its own experiment and its own ordinary results directory; everything else the sweep varies
is a plan axis of that experiment, so a derived experiment is planned, run, resumed and
reported like any other.
"""

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvbench.api import BenchmarkExperiment, EngineSpec
from kvbench.api.experiment import MAX_WORKERS, REPRODUCES
from kvbench.api.files import format_errors
from kvbench.api.load import MAX_PREFIXES
from kvbench.api.units import parse_quantity
from kvbench.sim.capacity import blocks_for_bytes
from kvbench.sim.geometry import ModelGeometry, UnknownModelError, resolve_geometry

__all__ = [
    "ARM_KINDS",
    "DerivedExperiment",
    "KvSize",
    "Sweep",
    "SweepError",
    "SweepRequest",
    "derive_sweep",
    "kv_from_bytes",
    "kv_from_tokens",
    "parse_counts",
    "parse_kv_bytes",
    "parse_kv_tokens",
]

SweepArm = Literal["service", "affinity"]
ARM_KINDS: dict[str, str] = {"service": "service", "affinity": "prefix_affinity"}
"""The sweep's arm names -> the routing arm kind each stands for: the two virtual time runs
on a shared-prefix workload (session affinity needs conversations, not prefixes)."""
_REFUSED_ARMS = {
    "router": "a router (vllm-router) is a real process that virtual time does not model",
    "kv-aware": "a KV-aware router is a real process that virtual time does not model; "
    "prefix affinity (affinity) is the bound such routing can reach",
    "cache-aware": "a cache-aware router is a real process that virtual time does not model; "
    "prefix affinity (affinity) is the bound such routing can reach",
    "dynamo": "Dynamo's router and workers are real processes, not modelled in virtual time",
    "external": "an external URL is a real server, not virtual",
    "session": "session affinity keeps conversations on a pod; the sweep's axis is prefixes",
}
_DEFAULT_ARM_NAMES = {"service": "service", "prefix_affinity": "affinity"}
_TOKEN_SUFFIXES = {"": 1, "k": 1024, "K": 1024, "Ki": 1024, "M": 1 << 20, "Mi": 1 << 20}
_TOKENS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|K|Ki|M|Mi)?$")
MAX_KV_TOKENS = 1 << 26
"""More tokens of KV than any worker holds (64 Mi tokens): a size above it is a typo."""


class SweepError(ValueError):
    """A sweep that cannot be derived from this file with these options; the message names
    the option or field to change."""


def _split(text: str, option: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise SweepError(f"{option}: a comma-separated list with no empty entries, got {text!r}")
    if len(set(parts)) != len(parts):
        raise SweepError(f"{option}: {text!r} lists a value twice")
    return parts


def parse_counts(text: str, option: str, most: int) -> list[int]:
    """A list such as `2,4,6` of whole numbers from 1 to `most` (workers, prefixes)."""
    values = []
    for part in _split(text, option):
        if not part.isdigit() or not 1 <= int(part) <= most:
            raise SweepError(f"{option}: {part!r} is not a whole number from 1 to {most}")
        values.append(int(part))
    if len(set(values)) != len(values):
        raise SweepError(f"{option}: {text!r} lists a value twice")
    return values


def parse_kv_tokens(text: str) -> list[int]:
    """Token counts such as `4k,9360,20k`; k means 1024 tokens (a 4k context is 4096)."""
    values = []
    for part in _split(text, "--kv-tokens"):
        match = _TOKENS.match(part)
        if not match:
            raise SweepError(
                f"--kv-tokens: {part!r} is not a token count (examples: 9360, 4k, 20k; k=1024)"
            )
        tokens = int(float(match.group(1)) * _TOKEN_SUFFIXES[match.group(2) or ""])
        if not 1 <= tokens <= MAX_KV_TOKENS:
            raise SweepError(f"--kv-tokens: {part!r} is not between 1 and {MAX_KV_TOKENS} tokens")
        values.append(tokens)
    return values


def parse_kv_bytes(text: str) -> list[int]:
    """Byte sizes as Kubernetes quantities, e.g. `512Mi,1Gi,2Gi`."""
    values = []
    for part in _split(text, "--kv-bytes"):
        try:
            size = parse_quantity(part)
        except ValueError as err:
            raise SweepError(f"--kv-bytes: {err}") from None
        if size != int(size) or not 1 <= size <= 1 << 50:
            raise SweepError(f"--kv-bytes: {part!r} is not a whole number of bytes up to 1Pi")
        values.append(int(size))
    return values


class KvSize(BaseModel):
    """One KV cache size of the sweep: what a worker holds (whole blocks) and the
    `kvCacheMemoryBytes` that gives exactly those blocks."""

    model_config = ConfigDict(frozen=True)

    tokens: int = Field(..., ge=1)
    bytes: int = Field(..., ge=1)
    asked: str = Field(..., description="The size as the option gave it, for messages")

    @property
    def variant(self) -> str:
        """The engine variant that runs this size (a DNS label)."""
        return f"kv{self.tokens}"


def _block(engine: EngineSpec) -> tuple[ModelGeometry, int, int]:
    """The engine's model geometry, KV element bytes and tokens per block."""
    try:
        geometry = resolve_geometry(engine.model)
    except UnknownModelError as err:
        raise SweepError(f"spec.engine.model: {err}") from None
    element = geometry.kv_element_bytes(engine.kv_cache_dtype or "auto", engine.dtype)
    return geometry, element, engine.block_tokens


def _check_fits(engine: EngineSpec, size: KvSize) -> KvSize:
    """A worker must hold one request of maxModelLen, or vLLM (and the simulator) refuses
    to start: better said now than as every run failing."""
    if engine.max_model_len is not None and size.tokens < engine.max_model_len:
        raise SweepError(
            f"KV size {size.asked} holds {size.tokens} tokens, fewer than one request of "
            f"spec.engine.maxModelLen ({engine.max_model_len}): vLLM refuses to start; give a "
            "larger size or lower maxModelLen"
        )
    return size


def kv_from_tokens(engine: EngineSpec, tokens: int) -> KvSize:
    """The size holding at least `tokens` tokens, rounded up to whole KV blocks of the model
    (its bytes per token from the geometry table, as `kvbench sim` computes capacity)."""
    geometry, element, block = _block(engine)
    blocks = -(-tokens // block)
    size = blocks * geometry.page_bytes(block, element) * geometry.num_layers
    return _check_fits(engine, KvSize(tokens=blocks * block, bytes=size, asked=f"{tokens} tokens"))


def kv_from_bytes(engine: EngineSpec, size: int) -> KvSize:
    """The tokens `size` bytes of KV hold (vLLM's `available // page_size // layers`)."""
    geometry, element, block = _block(engine)
    blocks = blocks_for_bytes(geometry, size, block_size=block, kv_element_bytes=element)
    if blocks == 0:
        raise SweepError(f"KV size {size} bytes holds no whole KV block of {engine.model}")
    return _check_fits(engine, KvSize(tokens=blocks * block, bytes=size, asked=f"{size} bytes"))


class SweepRequest(BaseModel):
    """What `kvbench sweep` was asked for, checked before anything is derived."""

    model_config = ConfigDict(frozen=True)

    workers: list[int] = Field(..., min_length=1)
    kv_tokens: list[int] | None = None
    kv_bytes: list[int] | None = None
    prefixes: list[int] | None = Field(None, min_length=1)
    arms: list[SweepArm] = Field(["service", "affinity"], min_length=1)
    pool: str | None = None
    concurrency: int | None = Field(None, ge=1)
    trials: int | None = Field(None, ge=1, le=100)

    @field_validator("workers")
    @classmethod
    def _workers(cls, values: list[int]) -> list[int]:
        if any(not 1 <= v <= MAX_WORKERS for v in values) or len(set(values)) != len(values):
            raise ValueError(f"distinct worker counts from 1 to {MAX_WORKERS}, got {values}")
        return sorted(values)

    @field_validator("arms", mode="before")
    @classmethod
    def _arms(cls, values: list[str]) -> list[str]:
        for arm in values:
            if arm in _REFUSED_ARMS:
                raise ValueError(f"{arm}: {_REFUSED_ARMS[arm]}")
            if arm not in ARM_KINDS:
                raise ValueError(f"{arm!r}: not an arm the sweep runs ({', '.join(ARM_KINDS)})")
        if len(set(values)) != len(values):
            raise ValueError(f"{values} names an arm twice")
        return values


class DerivedExperiment(BaseModel):
    """One worker count's experiment, and the directory (under the sweep's) it runs into."""

    model_config = ConfigDict(frozen=True)

    workers: int
    directory: str
    experiment: BenchmarkExperiment


class Sweep(BaseModel):
    """The derived experiments and how to read their results back: which arm name is which
    kind, which variant is which KV size."""

    model_config = ConfigDict(frozen=True)

    base: str
    experiments: list[DerivedExperiment]
    kv_sizes: list[KvSize]
    arms: dict[str, str] = Field(..., description="arm name in the experiments -> sweep arm")
    notes: list[str] = Field(default_factory=list, description="What the sweep changed or left")

    def kv_of(self, variant: str) -> KvSize | None:
        return next((k for k in self.kv_sizes if k.variant == variant), None)

    @property
    def runs(self) -> int:
        """Runs of all derived experiments together."""
        spec = self.experiments[0].experiment.spec
        per = len(spec.variant_names()) * len(spec.routing) * spec.point_count * spec.load.trials
        return per * len(self.experiments)


def _kv_sizes(engine: EngineSpec, request: SweepRequest) -> list[KvSize]:
    if request.kv_tokens is not None and request.kv_bytes is not None:
        raise SweepError("--kv-tokens and --kv-bytes: give one of the two")
    if request.kv_tokens is not None:
        sizes = [kv_from_tokens(engine, t) for t in request.kv_tokens]
    elif request.kv_bytes is not None:
        sizes = [kv_from_bytes(engine, b) for b in request.kv_bytes]
    elif engine.kv_cache_memory_bytes is not None:
        sizes = [kv_from_bytes(engine, engine.kv_cache_memory_bytes)]
    else:
        raise SweepError(
            "spec.engine.kvCacheMemoryBytes is not set (the KV size would come from the GPU "
            "profile): give --kv-tokens or --kv-bytes"
        )
    tokens = [s.tokens for s in sizes]
    twice = sorted({t for t in tokens if tokens.count(t) > 1})
    if twice:
        raise SweepError(f"KV sizes: {', '.join(map(str, twice))} tokens given twice (after "
                         "rounding to whole blocks)")  # fmt: skip
    return sorted(sizes, key=lambda s: s.tokens)


def _arms(experiment: BenchmarkExperiment, request: SweepRequest) -> tuple[list[dict], list[str]]:
    """The routing arms: the file's arm of each kind asked for (its name kept), else a new
    one; and a note naming the file's arms the sweep leaves out."""
    spec = experiment.spec
    arms, used = [], set()
    for wanted in request.arms:
        kind = ARM_KINDS[wanted]
        mine = next((a for a in spec.routing if a.kind == kind), None)
        if mine is not None:
            used.add(mine.name)
            arms.append(mine.model_dump(mode="json", by_alias=True, exclude_none=True))
        else:
            name = _DEFAULT_ARM_NAMES[kind]
            if any(a.name == name for a in spec.routing):
                name = f"sweep-{name}"
            key = "service" if kind == "service" else "prefixAffinity"
            arms.append({"name": name, key: {}})
    left = [a.name for a in spec.routing if a.name not in used]
    notes = [f"arms left out: {', '.join(left)} (the sweep runs {', '.join(request.arms)})"]
    return arms, notes if left else []


def _pool(experiment: BenchmarkExperiment, request: SweepRequest) -> tuple[dict, list[str]]:
    """The pool whose replicas the sweep sets. Several pools are mixed hardware: scaling them
    together has no single answer, so the caller names the one to scale (--pool) and the
    sweep models a fleet of that pool's hardware alone."""
    pools = experiment.spec.workers
    names = [p.name for p in pools]
    if request.pool is not None:
        chosen = next((p for p in pools if p.name == request.pool), None)
        if chosen is None:
            raise SweepError(f"--pool {request.pool}: no such pool (the file has {names})")
    elif len(pools) == 1:
        chosen = pools[0]
    else:
        raise SweepError(
            f"spec.workers has {len(pools)} pools ({', '.join(names)}): name with --pool the one "
            "whose replicas --workers sets; the others are left out (a fleet of that hardware)"
        )
    notes = []
    if len(pools) > 1:
        others = ", ".join(n for n in names if n != chosen.name)
        notes.append(f"pool {chosen.name} scaled to --workers; pools left out: {others}")
    return chosen.model_dump(mode="json", by_alias=True, exclude_none=True), notes


def _load(spec_load: dict, request: SweepRequest) -> tuple[dict, list[str]]:
    """One concurrency (the planner's load level; default the file's highest) and one request
    rate at most: the table's rows are workers x KV x prefixes."""
    load = dict(spec_load)
    if request.concurrency is not None:
        load["concurrency"] = [request.concurrency]
    elif len(load["concurrency"]) > 1:
        load["concurrency"] = [max(load["concurrency"])]
    if len(load.get("requestRates") or []) > 1:
        raise SweepError(
            f"spec.load.requestRates lists {len(load['requestRates'])} rates: the sweep runs "
            "one load level; keep one rate in the file"
        )
    if request.trials is not None:
        load["trials"] = request.trials
    return load, []


def derive_sweep(experiment: BenchmarkExperiment, request: SweepRequest) -> Sweep:
    """One experiment per worker count, each validated as a file would be."""
    spec = experiment.spec
    shared = spec.workload.shared_prefix
    if shared is None:
        raise SweepError(
            "spec.workload.sharedPrefix: the sweep's axis is the number of shared prefixes; "
            "the file's workload has none"
        )
    if spec.variants:
        raise SweepError(
            f"spec.variants ({', '.join(spec.variant_names())}): the sweep's KV sizes are its "
            "variants; remove them (put the one you want into spec.engine)"
        )
    prefixes = request.prefixes or shared.prefixes
    if any(not 1 <= p <= MAX_PREFIXES for p in prefixes) or len(set(prefixes)) != len(prefixes):
        raise SweepError(f"--prefixes: distinct counts from 1 to {MAX_PREFIXES}, got {prefixes}")
    if shared.popularity.weights is not None and prefixes != [len(shared.popularity.weights)]:
        raise SweepError(
            "spec.workload.sharedPrefix.popularity.weights fixes the number of prefixes; a "
            "sweep over prefixes needs uniform or zipf popularity"
        )
    kv_sizes = _kv_sizes(spec.engine, request)
    arms, notes = _arms(experiment, request)
    pool, pool_notes = _pool(experiment, request)
    document = experiment.model_dump(mode="json", by_alias=True, exclude_none=True)
    document.pop("status", None)
    document["metadata"] = {
        k: v for k, v in document["metadata"].items() if k in ("name", "labels", "annotations")
    }
    document["metadata"]["annotations"] = {
        k: v for k, v in document["metadata"].get("annotations", {}).items() if k != REPRODUCES
    }
    body = document["spec"]
    body["routing"] = arms
    body["variants"] = [
        {"name": kv.variant, "engine": {"kvCacheMemoryBytes": kv.bytes}} for kv in kv_sizes
    ]
    body["workload"]["sharedPrefix"]["prefixes"] = sorted(prefixes)
    body["load"], load_notes = _load(body["load"], request)
    body.setdefault("simulator", {})["mode"] = "virtual"
    derived = []
    for workers in request.workers:
        name = f"{experiment.metadata.name[:33].rstrip('-')}-w{workers}"
        body["workers"] = [pool | {"replicas": workers}]
        document["metadata"]["name"] = name
        try:
            one = BenchmarkExperiment.model_validate(document)
        except ValidationError as err:
            raise SweepError(
                f"the experiment for {workers} workers is not valid: "
                + "; ".join(format_errors(err))
            ) from None
        derived.append(DerivedExperiment(workers=workers, directory=f"w{workers}", experiment=one))
    arm_names = {arm["name"]: wanted for arm, wanted in zip(arms, request.arms, strict=True)}
    return Sweep(
        base=experiment.metadata.name,
        experiments=derived,
        kv_sizes=kv_sizes,
        arms=arm_names,
        notes=notes + pool_notes + load_notes,
    )
