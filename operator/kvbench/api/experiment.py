"""The BenchmarkExperiment resource: the spec's root with its cross-area rules, and the resource."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench.api.base import ApiModel, SpecModel
from kvbench.api.engine import EngineSpec
from kvbench.api.execution import (
    Cleanup,
    Execution,
    LoadGenerator,
    MetricsSource,
    Simulator,
    Timeouts,
)
from kvbench.api.load import MAX_REQUESTS, LoadSpec
from kvbench.api.routing import TEXT_POLICIES, RoutingArm
from kvbench.api.slo import Objectives
from kvbench.api.status import ExperimentStatus
from kvbench.api.workers import Variant, WorkerPool
from kvbench.api.workload import Workload

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "MAX_RUNS",
    "MAX_SPEC_BYTES",
    "MAX_WORKERS",
    "PLURAL",
    "SHORT_NAME",
    "VERSION",
    "BenchmarkExperiment",
    "ExperimentSpec",
    "ObjectMeta",
]

GROUP = "kvbench.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "BenchmarkExperiment"
PLURAL = "benchmarkexperiments"
SHORT_NAME = "bx"

_NAMED_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}

MAX_RUNS = 2000
"""Runs of one experiment: its plan is built in one go, its aggregate sits in the status."""
MAX_WORKERS = 256
"""Worker pods of one experiment, over all pools (each is in the status of every run)."""
MAX_SPEC_BYTES = 64 << 10
"""The spec as JSON (a real one is a few KiB): kubectl keeps a copy in an annotation (all of
an object's share 256 KiB), the results store another in a ConfigMap beside the run states."""


class ExperimentSpec(SpecModel):
    """What to measure and how: engine, workers, variants, routing arms, workload and load."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!self.routing.exists(a, has(a.prefixAffinity)) || "
                    "has(self.workload.sharedPrefix) || has(self.workload.trace)",
                    "message": "prefixAffinity routing needs workload.sharedPrefix or "
                    "workload.trace",
                },
                {
                    "rule": "!has(self.workload.trace) || !has(self.load.requestRates)",
                    "message": "a trace replay has its own timing (trace.timing): no "
                    "load.requestRates",
                },
                {
                    "rule": "!self.routing.exists(a, has(a.sessionAffinity)) || "
                    "has(self.workload.conversation)",
                    "message": "sessionAffinity routing needs workload.conversation",
                },
                {
                    "rule": "!has(self.workload.interference) || self.load.concurrency == [1]",
                    "message": "the interference workload runs one stream: load.concurrency [1]",
                },
                {
                    "rule": "self == oldSelf",
                    "message": "spec is immutable once the experiment exists: its runs must all "
                    "measure one spec; delete and re-create the experiment to change it",
                },
            ]
        }
    }

    engine: EngineSpec
    workers: list[WorkerPool] = Field(
        ..., min_length=1, max_length=16, json_schema_extra=_NAMED_LIST
    )
    variants: list[Variant] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra=_NAMED_LIST,
        description="Named engine changes, each on fresh servers (none: one variant, default)",
    )
    routing: list[RoutingArm] = Field(
        ..., min_length=1, max_length=16, json_schema_extra=_NAMED_LIST
    )
    workload: Workload
    load: LoadSpec
    freshness: Literal["restart", "reset-cache", "none"] = Field(
        "restart",
        description="restart: new worker pods for every run; reset-cache: POST "
        "/reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1); none: reuse as they are",
    )
    metrics: MetricsSource = Field(default_factory=MetricsSource)
    load_generator: LoadGenerator = Field(default_factory=LoadGenerator)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    execution: Execution = Field(default_factory=Execution)
    cleanup: Cleanup = Field(default_factory=Cleanup)
    simulator: Simulator = Field(default_factory=Simulator)
    slo: Objectives | None = Field(
        None,
        description="Service-level objectives per request: goodput is the requests per second "
        "that meet all of them (vllm bench serve --goodput's convention)",
    )

    @model_validator(mode="after")
    def _bounded(self) -> "ExperimentSpec":
        size = len(self.model_dump_json(by_alias=True, exclude_none=True))
        if size > MAX_SPEC_BYTES:
            raise ValueError(f"the spec is {size} bytes as JSON; at most {MAX_SPEC_BYTES}")
        if self.total_workers > MAX_WORKERS:
            raise ValueError(
                f"workers: {self.total_workers} replicas in all; at most {MAX_WORKERS}"
            )
        runs = len(self.variant_names()) * len(self.routing) * self.point_count
        runs *= self.load.trials
        if runs > MAX_RUNS:
            raise ValueError(
                f"load: variants x routing arms x points x trials make {runs} runs; at most "
                f"{MAX_RUNS} (fewer points, trials, arms or variants)"
            )
        most = self.workload.most_requests(max(self.load.concurrency))
        warmup = self.load.warmup
        most_warmup = max(warmup.requests, warmup.requests_per_prefix * self.most_prefixes)
        if max(most, most_warmup) > MAX_REQUESTS:
            raise ValueError(
                f"workload: a point would send {max(most, most_warmup)} requests (measured or "
                f"warm-up); at most {MAX_REQUESTS}"
            )
        return self

    @model_validator(mode="after")
    def _names_unique(self) -> "ExperimentSpec":
        for field, items in (
            ("workers", self.workers),
            ("variants", self.variants),
            ("routing", self.routing),
        ):
            names = [item.name for item in items]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{field}: names must be unique, {', '.join(twice)} repeated")
        return self

    @model_validator(mode="after")
    def _variants_valid(self) -> "ExperimentSpec":
        for i, variant in enumerate(self.variants):
            try:
                self.engine.with_overrides(variant.engine)
            except ValueError as err:
                raise ValueError(f"variants[{i}] ({variant.name}).engine: {err}") from None
        return self

    @model_validator(mode="after")
    def _requests_fit(self) -> "ExperimentSpec":
        longest = self.workload.longest_request()
        for name, engine in self.engines().items():
            if engine.max_model_len is not None and longest > engine.max_model_len:
                raise ValueError(
                    f"workload: a request holds up to {longest} tokens (prompt + output) but "
                    f"variant {name!r} has engine.maxModelLen {engine.max_model_len}: vLLM would "
                    "reject it; shorten the workload or raise maxModelLen"
                )
        return self

    @model_validator(mode="after")
    def _arms_fit_workload(self) -> "ExperimentSpec":
        for arm in self.routing:
            grouped = self.workload.shared_prefix is not None or self.workload.trace is not None
            if arm.prefix_affinity is not None and not grouped:
                raise ValueError(
                    f"routing[{arm.name}].prefixAffinity groups requests by prefix: it needs "
                    "workload.sharedPrefix or workload.trace (grouped by first hash id)"
                )
            if arm.session_affinity is not None and self.workload.conversation is None:
                raise ValueError(
                    f"routing[{arm.name}].sessionAffinity keeps a conversation on one pod: it "
                    "needs workload.conversation"
                )
            if (
                arm.router is not None
                and arm.router.policy in TEXT_POLICIES
                and self.workload.prompt_format != "text"
            ):
                raise ValueError(
                    f"routing[{arm.name}].router.policy {arm.router.policy} routes on prompt "
                    "text: set workload.promptFormat to text"
                )
        return self

    @model_validator(mode="after")
    def _load_fits_workload(self) -> "ExperimentSpec":
        if self.workload.interference is not None:
            if self.load.request_rates is not None:
                raise ValueError(
                    "load.requestRates: the interference workload has its own timing; remove it"
                )
            if self.load.concurrency != [1]:
                raise ValueError(
                    "load.concurrency: the interference workload runs one stream; set it to [1]"
                )
        if self.workload.conversation is not None:
            if self.load.request_rates is not None:
                raise ValueError(
                    "load.requestRates: conversations run closed loop (load.concurrency "
                    "conversations at once, thinkTime between turns); remove it"
                )
            if self.workload.prompt_format != "text":
                raise ValueError(
                    "workload.promptFormat: a conversation is sent as chat messages "
                    "(/v1/chat/completions); set it to text"
                )
        if self.workload.trace is not None and self.load.request_rates is not None:
            raise ValueError(
                "load.requestRates: a trace replay has its own timing (trace.timing: trace "
                "sends each row at its timestamp, closed a closed loop); remove it"
            )
        if self.freshness == "reset-cache":
            for name, engine in self.engines().items():
                if not any(v.name == "VLLM_SERVER_DEV_MODE" and v.value == "1" for v in engine.env):
                    raise ValueError(
                        f"freshness reset-cache needs env VLLM_SERVER_DEV_MODE=1 in the engine "
                        f"of variant {name!r} (vLLM only serves /reset_prefix_cache then)"
                    )
        return self

    def variant_names(self) -> list[str]:
        """Variants in order; `default` when the spec names none."""
        return [v.name for v in self.variants] or ["default"]

    def engines(self) -> dict[str, EngineSpec]:
        """The resolved engine of every variant."""
        if not self.variants:
            return {"default": self.engine}
        return {v.name: self.engine.with_overrides(v.engine) for v in self.variants}

    def for_arm(self, arm: RoutingArm) -> "ExperimentSpec":
        """The spec as `arm`'s runs see it: the simulator at the arm's time scale
        (`Simulator.time_scale_of`), so its workers and load generator go at it."""
        scale = self.simulator.time_scale_of(arm)
        if scale == self.simulator.time_scale:
            return self
        simulator = self.simulator.model_copy(update={"time_scale": scale})
        return self.model_copy(update={"simulator": simulator})

    @property
    def total_workers(self) -> int:
        return sum(pool.replicas for pool in self.workers)

    @property
    def most_prefixes(self) -> int:
        """The largest prefix count of the workload's points (1 without shared prefixes)."""
        shared = self.workload.shared_prefix
        return max(shared.prefixes) if shared is not None else 1

    @property
    def point_count(self) -> int:
        """Workload points: prefix counts x request rates x concurrencies."""
        shared = self.workload.shared_prefix
        prefixes = len(shared.prefixes) if shared is not None else 1
        return prefixes * len(self.load.request_rates or [None]) * len(self.load.concurrency)


REPRODUCES = "kvbench.io/reproduces"
"""The annotation naming the published measurement an experiment reproduces (a file under
examples/references/): the report prints those figures beside the measured ones."""


class ObjectMeta(BaseModel):
    """The parts of Kubernetes metadata kvbench reads; the rest is kept as it is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(
        ...,
        pattern=r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$",
        max_length=40,
        description="At most 40 characters, so `<name>-r<run>-a<attempt>-load` and the other "
        "children stay within Kubernetes' 63; a letter first, as Service names need",
    )
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None


class BenchmarkExperiment(ApiModel):
    """The custom resource, as `kubectl apply` and `kvbench run` read it."""

    api_version: Literal["kvbench.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["BenchmarkExperiment"] = KIND
    metadata: ObjectMeta
    spec: ExperimentSpec
    status: ExperimentStatus | None = None
