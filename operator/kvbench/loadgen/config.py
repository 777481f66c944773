"""`RunConfig`: everything one load-generator run needs, as the Job receives it (JSON).

The request sequence is a pure function of (workload, point, seed, warm-up, token space, and
a trace workload's trace bytes), so two configs that differ only in `target` or `metrics`
send byte-identical traffic. A trace travels beside the config, not in it (a file, or the
ConfigMap the Job mounts); the config names its sha256, which the load generator checks.
"""

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from kvbench.api import Point
from kvbench.api.base import ApiModel
from kvbench.api.load import Warmup
from kvbench.api.slo import Objectives
from kvbench.api.units import Duration, parse_duration
from kvbench.api.workload import TraceInfo, Workload

__all__ = [
    "ConfigError",
    "DirectMetrics",
    "LoadTarget",
    "MetricsConfig",
    "PrefixAffinityTarget",
    "PrometheusMetrics",
    "RunConfig",
    "TokenSpace",
    "UrlTarget",
    "load_config",
]

_URL = r"^https?://[^\s/]+(/.*)?$"


class ConfigError(ValueError):
    """A run config that cannot be read or validated; the message names every bad field."""


class UrlTarget(ApiModel):
    """One base URL for every request: a Service, a router or an external front end."""

    kind: Literal["url"] = "url"
    url: str = Field(..., pattern=_URL, description="Base URL, without /v1/...")
    nvext: bool = Field(
        False,
        description="A Dynamo frontend: ask for the serving worker of every request "
        '(`"nvext": {"extra_fields": ["worker_id"]}`)',
    )


class PrefixAffinityTarget(ApiModel):
    """Each prefix group goes straight to one pod, chosen by consistent hashing over `pods`."""

    kind: Literal["prefix-affinity"] = "prefix-affinity"
    pods: dict[str, Annotated[str, Field(pattern=_URL)]] = Field(
        ..., min_length=1, description="Pod name -> base URL of its server"
    )


LoadTarget = Annotated[UrlTarget | PrefixAffinityTarget, Field(discriminator="kind")]


class DirectMetrics(ApiModel):
    """Scrape every worker's /metrics right before and right after the measured window."""

    kind: Literal["direct"] = "direct"
    pods: dict[str, Annotated[str, Field(pattern=_URL)]] = Field(
        ..., min_length=1, description="Pod name -> full URL of its /metrics"
    )
    timeout: Duration = "10s"
    settle: Duration = Field(
        "200ms", description="Read again after this until two reads agree (late counting)"
    )
    worker_ids: dict[str, int] = Field(
        default_factory=dict,
        description="Pod name -> the worker id a front end reports per request (Dynamo's "
        "nvext); pods whose /metrics have no prefix-cache counters get them from the "
        "responses attributed to them",
    )


class PrometheusMetrics(ApiModel):
    """Query Prometheus for the counters of the pods it scrapes, per pod, over the window."""

    kind: Literal["prometheus"] = "prometheus"
    url: str = Field(..., pattern=_URL)
    pod_label: str = Field("pod", min_length=1, description="The label naming the pod")
    selector: dict[str, str] = Field(
        default_factory=dict, description="Extra label matchers, e.g. namespace and app"
    )
    pods: list[str] | None = Field(
        None, description="Pods that must be present (default: whatever the selector finds)"
    )
    scrape_wait: Duration = Field(
        "2m", description="How long to wait for a scrape newer than a window edge"
    )
    timeout: Duration = "30s"


MetricsConfig = Annotated[DirectMetrics | PrometheusMetrics, Field(discriminator="kind")]


class TokenSpace(ApiModel):
    """Token ids prompts are drawn from: below every common vocabulary's special tokens."""

    low: int = Field(1000, ge=0)
    high: int = Field(30000, ge=1, description="Exclusive; must be below the model's vocab size")

    @model_validator(mode="after")
    def _ordered(self) -> "TokenSpace":
        if self.high <= self.low:
            raise ValueError(f"tokens.high ({self.high}) must be above tokens.low ({self.low})")
        return self


class RunConfig(ApiModel):
    """One run: where to send, what to send, how, and where the counters are."""

    schema_version: Literal[1] = 1
    run_id: str = Field("run", min_length=1)
    model: str = Field(..., min_length=1, description="Model name sent in every request")
    api: Literal["completions", "chat"] = Field(
        "completions", description="/v1/completions (text or token ids) or /v1/chat/completions"
    )
    target: LoadTarget
    workload: Workload
    point: Point
    seed: int = Field(..., ge=0, description="The run's sequence seed (PlannedRun.seed)")
    warmup: Warmup = Field(default_factory=Warmup)
    tokens: TokenSpace = Field(default_factory=TokenSpace)
    connection: Literal["new", "keep-alive"] = "new"
    request_timeout: Duration = "10m"
    connect_timeout: Duration = "10s"
    time_scale: float = Field(
        1.0,
        ge=0,
        description="Wall seconds per server second (a time-scaled simulator); arrival "
        "schedules (Poisson rates, injection times) are given in server seconds",
    )
    metrics: MetricsConfig | None = None
    lag_threshold: float = Field(
        0.005, gt=0, description="Event-loop lag (s, p99) above which a run is client-bound"
    )
    slo: Objectives | None = Field(None, description="Objectives for goodput, if any")
    trace: TraceInfo | None = Field(
        None, description="A trace workload: the trace the experiment was planned with"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "RunConfig":
        if self.api == "chat" and self.workload.prompt_format != "text":
            raise ValueError("api chat needs workload.promptFormat text")
        if self.workload.shared_prefix is not None and self.point.prefixes is None:
            raise ValueError("a sharedPrefix workload needs point.prefixes")
        if self.point.request_rate is not None and self.workload.interference is not None:
            raise ValueError("the interference workload has its own schedule: no requestRate")
        if (self.workload.trace is None) != (self.trace is None):
            raise ValueError("trace is set for a trace workload, and only for one")
        if self.point.request_rate is not None and self.workload.trace is not None:
            raise ValueError("a trace replay has its own timing: no requestRate")
        return self

    @property
    def request_timeout_seconds(self) -> float:
        return parse_duration(self.request_timeout)

    @property
    def connect_timeout_seconds(self) -> float:
        return parse_duration(self.connect_timeout)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


def load_config(path: Path) -> RunConfig:
    """The validated config in a JSON file, or a ConfigError listing every problem."""
    try:
        return RunConfig.model_validate_json(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err}") from None
    except ValidationError as err:
        lines = [
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors()
        ]
        raise ConfigError(f"{path} is not a valid run config:\n  " + "\n  ".join(lines)) from None
