"""Workloads: what requests are sent. Each kind is one member of `Workload` (exactly one)."""

from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kvbench.api.base import ApiModel, SpecModel
from kvbench.api.engine import MAX_TOKENS
from kvbench.api.load import MAX_PREFIXES, MAX_REQUESTS
from kvbench.api.names import NO_NUL, DnsSubdomain
from kvbench.api.units import Duration

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "WORKLOAD_KINDS",
    "ConversationWorkload",
    "InterferenceWorkload",
    "Length",
    "PrefixPopularity",
    "RandomWorkload",
    "SharedPrefixWorkload",
    "TraceConfigMap",
    "TraceInfo",
    "TraceWorkload",
    "Workload",
]

MAX_WEIGHTS = 4096  # explicit weights: a list a person writes, kept small for the CRD
WORKLOAD_KINDS = ("shared_prefix", "random", "interference", "conversation", "trace")
_TRACE_SOURCE = "set file (kvbench run) or configMap (a cluster), exactly one"
MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per hash id in Mooncake's traces (the paper's KV block), guidellm's and aiperf's
default too."""


class ZipfPopularity(SpecModel):
    """Prefix k (from 1) is asked in proportion to 1 / k^s."""

    s: float = Field(..., gt=0, le=4, description="Exponent: 0.6 mild, 1.0 classic, 1.4 steep")


class PrefixPopularity(SpecModel):
    """How often each prefix is asked: uniform (neither field), Zipf, or explicit weights."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.zipf) || !has(self.weights)",
                    "message": "set zipf or weights, not both",
                }
            ]
        }
    }

    zipf: ZipfPopularity | None = None
    weights: list[Annotated[float, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_WEIGHTS,
        description="One weight per prefix, in prefix order (the point's prefix count)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> "PrefixPopularity":
        if self.zipf is not None and self.weights is not None:
            raise ValueError("set zipf or weights, not both")
        if self.weights is not None and not any(w > 0 for w in self.weights):
            raise ValueError("weights are all zero: no prefix would ever be asked")
        return self

    @property
    def label(self) -> str:
        """Short form for tables: uniform, zipf s=1.0, weights 5:3:1."""
        if self.zipf is not None:
            return f"zipf s={self.zipf.s:g}"
        if self.weights is not None:
            return "weights " + ":".join(f"{w:g}" for w in self.weights)
        return "uniform"

    def weights_for(self, prefixes: int) -> list[float]:
        """Relative popularity of each of `prefixes` prefixes, in prefix order."""
        if self.zipf is not None:
            return [1.0 / (k + 1) ** self.zipf.s for k in range(prefixes)]
        if self.weights is not None:
            if len(self.weights) != prefixes:
                raise ValueError(
                    f"popularity.weights has {len(self.weights)} entries for {prefixes} prefixes"
                )
            return list(self.weights)
        return [1.0] * prefixes


class SharedPrefixWorkload(SpecModel):
    """Article 002: requests share one of P prefixes and carry a unique suffix.

    Each entry of `prefixes` is one workload point. Requests per point are
    `prefixes x requestsPerPrefix`, at least `minRequests`.
    """

    prefixes: list[Annotated[int, Field(ge=1, le=MAX_PREFIXES)]] = Field(
        ..., min_length=1, max_length=64, description="Numbers of distinct prefixes, one point each"
    )
    prefix_tokens: int = Field(2032, ge=1, le=MAX_TOKENS, description="Tokens of the shared prefix")
    suffix_tokens: int = Field(339, ge=1, le=MAX_TOKENS, description="Tokens of the unique suffix")
    output_tokens: int = Field(64, ge=1, le=MAX_TOKENS, description="Tokens generated per request")
    requests_per_prefix: int = Field(20, ge=1, le=MAX_REQUESTS)
    min_requests: int = Field(200, ge=1, le=MAX_REQUESTS)
    popularity: PrefixPopularity = Field(
        default_factory=PrefixPopularity,
        description="How often each prefix is asked (default: all equally, as article 002)",
    )

    @field_validator("prefixes")
    @classmethod
    def _distinct_points(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError(f"prefixes lists a number twice: {values}")
        return values

    @model_validator(mode="after")
    def _weights_fit(self) -> "SharedPrefixWorkload":
        weights = self.popularity.weights
        if weights is not None and self.prefixes != [len(weights)]:
            raise ValueError(
                f"popularity.weights has {len(weights)} entries: prefixes must then be "
                f"[{len(weights)}] (it is {self.prefixes})"
            )
        return self

    def requests_for(self, prefixes: int) -> int:
        """Measured requests of the point with this many prefixes."""
        return max(self.min_requests, prefixes * self.requests_per_prefix)

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.suffix_tokens


class Length(SpecModel):
    """A token length: fixed (`mean` only) or drawn from a distribution, clipped to min/max."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                    "message": "min must not be above max",
                }
            ]
        }
    }

    distribution: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: int = Field(..., ge=1, le=MAX_TOKENS)
    stddev: float | None = Field(None, ge=0, le=MAX_TOKENS, description="normal and lognormal only")
    min: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max: int | None = Field(None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _consistent(self) -> "Length":
        if self.distribution in ("normal", "lognormal") and self.stddev is None:
            raise ValueError(f"a {self.distribution} length needs stddev")
        if self.distribution == "uniform" and (self.min is None or self.max is None):
            raise ValueError("a uniform length needs min and max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self

    @property
    def upper(self) -> int:
        """The longest length this can produce (for fit checks against maxModelLen)."""
        if self.max is not None:
            return self.max
        if self.distribution == "fixed":
            return self.mean
        raise ValueError(f"a {self.distribution} length without max has no upper bound")


class RandomWorkload(SpecModel):
    """Article 000's sweeps: distinct random prompts (never repeated, so no prefix hits)."""

    input_tokens: Length
    output_tokens: Length
    requests: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Measured requests per point"
    )
    requests_per_concurrency: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Or: measured requests = concurrency x this"
    )

    @model_validator(mode="after")
    def _one_count(self) -> "RandomWorkload":
        if self.requests is not None and self.requests_per_concurrency is not None:
            raise ValueError("set requests or requestsPerConcurrency, not both")
        if self.input_tokens.distribution != "fixed" and self.input_tokens.max is None:
            raise ValueError("inputTokens needs max unless it is fixed")
        if self.output_tokens.distribution != "fixed" and self.output_tokens.max is None:
            raise ValueError("outputTokens needs max unless it is fixed")
        return self

    def requests_for(self, concurrency: int) -> int:
        """Measured requests of a point at this concurrency (default: 4 per slot)."""
        if self.requests is not None:
            return self.requests
        return concurrency * (self.requests_per_concurrency or 4)


class InterferenceWorkload(SpecModel):
    """Article 000's chunk-size test: one long decoding stream while long prompts arrive.

    The stream's inter-token gaps are the result.
    """

    stream_input_tokens: int = Field(32, ge=1, le=MAX_TOKENS)
    stream_output_tokens: int = Field(1024, ge=2, le=MAX_TOKENS)
    prompts: int = Field(
        3, ge=1, le=MAX_REQUESTS, description="Long prompts injected during the stream"
    )
    prompt_tokens: int = Field(3500, ge=1, le=MAX_TOKENS)
    prompt_output_tokens: int = Field(1, ge=1, le=MAX_TOKENS)
    inject_after: Duration = Field("1s", description="When the first prompt arrives")
    inject_interval: Duration = Field("0s", description="Gap between injected prompts")


class ConversationWorkload(SpecModel):
    """Multi-turn chats: each turn sends the conversation so far (the system prompt, every
    earlier user turn and the answer the server actually gave) plus new user text, as a chat
    client resends it, so a turn can hit the cache its previous turn left on a worker.

    `load.concurrency` conversations are in progress at once; a user thinks `thinkTime`
    (server seconds) between an answer and the next turn, during which the slot is idle.
    """

    conversations: int = Field(
        ..., ge=1, le=MAX_REQUESTS, description="Measured conversations per point"
    )
    turns: int = Field(..., ge=1, le=256, description="User turns per conversation")
    user_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="New user text per turn")
    assistant_tokens: int = Field(
        128, ge=1, le=MAX_TOKENS, description="Tokens the server generates per turn"
    )
    system_prompt_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="A system prompt every conversation shares (0: none)"
    )
    think_time: Duration = Field("0s", description="Between an answer and the next turn")

    @model_validator(mode="after")
    def _bounded(self) -> "ConversationWorkload":
        if self.conversations * self.turns > MAX_REQUESTS:
            raise ValueError(
                f"conversations x turns make {self.conversations * self.turns} requests; at "
                f"most {MAX_REQUESTS}"
            )
        return self

    @property
    def requests(self) -> int:
        return self.conversations * self.turns

    @property
    def longest_prompt(self) -> int:
        """Tokens of the last turn's prompt, chat template markup aside."""
        return self.system_prompt_tokens + self.turns * self.user_tokens + (
            self.turns - 1
        ) * self.assistant_tokens


class TraceConfigMap(SpecModel):
    """A ConfigMap in the experiment's namespace that holds the trace: its keys (one, or
    `chunk-000`, `chunk-001`, ...) concatenated in name order (`kvbench trace configmap`)."""

    name: DnsSubdomain


class TraceWorkload(SpecModel):
    """Replay a trace: one request per row, its prompt made block by block from the row's
    hash ids (docs/workloads.md, "Trace replay"). The trace is read where the run is: a file
    for `kvbench run`, a ConfigMap on a cluster."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.file) != has(self.configMap)", "message": _TRACE_SOURCE}
            ]
        }
    }

    file: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        pattern=NO_NUL,
        description="kvbench run: the trace file; a relative path is read from the experiment "
        "file's directory",
    )
    config_map: TraceConfigMap | None = Field(
        None, description="On a cluster: the ConfigMap that holds the trace"
    )
    format: Literal["mooncake"] = Field(
        "mooncake",
        description="One JSON object per line: timestamp (ms), input_length, output_length, "
        "hash_ids",
    )
    block_tokens: int = Field(
        MOONCAKE_BLOCK_TOKENS, ge=1, le=MAX_TOKENS, description="Tokens per hash id"
    )
    timing: Literal["trace", "closed"] = Field(
        "trace",
        description="trace: each row sent at its timestamp / speedup (in flight capped by "
        "load.concurrency); closed: timestamps ignored, a closed loop at load.concurrency",
    )
    speedup: float = Field(1.0, gt=0, le=1000, description="The trace's time divided by this")
    max_rows: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Replay only the first rows (warm-up included)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> "TraceWorkload":
        if (self.file is None) == (self.config_map is None):
            raise ValueError(_TRACE_SOURCE)
        return self

    @property
    def source(self) -> str:
        """Where the trace is read from, in words: the file's name or the ConfigMap's."""
        if self.config_map is not None:
            return f"ConfigMap {self.config_map.name}"
        assert self.file is not None
        return PurePath(self.file).name


class TraceInfo(ApiModel):
    """The trace a run replays, as it was read: what its sequence was built from, and its
    shape for plans and reports."""

    source: str = Field(..., description="The file's name or the ConfigMap's, in words")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$", description="Of the trace's bytes")
    rows: int = Field(..., ge=1, description="Rows replayed (warm-up included, after maxRows)")
    input_tokens: int = Field(..., ge=1, description="Mean input_length of those rows")
    output_tokens: int = Field(..., ge=1, description="Mean output_length of those rows")
    seconds: float = Field(..., ge=0, description="From the first row's timestamp to the last")


class Workload(SpecModel):
    """Exactly one workload kind, and how prompts are written."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "oneOf": [
                {"required": ["sharedPrefix"]},
                {"required": ["random"]},
                {"required": ["interference"]},
                {"required": ["conversation"]},
                {"required": ["trace"]},
            ]
        }
    }

    prompt_format: Literal["token-ids", "text"] = Field(
        "token-ids",
        description="token-ids give exact lengths (vLLM's completions API); text is for front "
        "ends and routers that only read text",
    )
    shared_prefix: SharedPrefixWorkload | None = None
    random: RandomWorkload | None = None
    interference: InterferenceWorkload | None = None
    conversation: ConversationWorkload | None = None
    trace: TraceWorkload | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Workload":
        chosen = [k for k in WORKLOAD_KINDS if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(
                "workload needs exactly one of sharedPrefix, random, interference, conversation, "
                "trace "
                f"(found {len(chosen) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        """shared_prefix, random, interference, conversation or trace."""
        return next(k for k in WORKLOAD_KINDS if getattr(self, k) is not None)

    def most_requests(self, concurrency: int) -> int:
        """Most measured requests of one point, at the highest `concurrency` (a trace's:
        its maxRows, or 0 when only the trace knows; reading it bounds its rows)."""
        if self.trace is not None:
            return self.trace.max_rows or 0
        if self.shared_prefix is not None:
            return self.shared_prefix.requests_for(max(self.shared_prefix.prefixes))
        if self.random is not None:
            return self.random.requests_for(concurrency)
        if self.conversation is not None:
            return self.conversation.requests
        assert self.interference is not None
        return 1 + self.interference.prompts

    def longest_request(self) -> int:
        """Most tokens (prompt + output) one request can hold (a trace's: 0 here, its rows
        are checked against maxModelLen once it is read)."""
        if self.trace is not None:
            return 0
        if self.shared_prefix is not None:
            return self.shared_prefix.prompt_tokens + self.shared_prefix.output_tokens
        if self.random is not None:
            return self.random.input_tokens.upper + self.random.output_tokens.upper
        if self.conversation is not None:
            return self.conversation.longest_prompt + self.conversation.assistant_tokens
        assert self.interference is not None
        w = self.interference
        return max(
            w.stream_input_tokens + w.stream_output_tokens, w.prompt_tokens + w.prompt_output_tokens
        )
