"""The serving engine: vLLM's image, model and flags, and how they become `vllm serve` arguments."""

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvbench.api.base import MAX_INT, SpecModel
from kvbench.api.kube import EnvVar, ModelCache, SecretKeyRef
from kvbench.api.names import Arg, ImageRef, LiteralArg
from kvbench.api.units import ByteSize

__all__ = ["MAX_TOKENS", "EngineOverrides", "EngineSpec", "VllmFlags"]

KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]
ModelDtype = Literal["auto", "bfloat16", "float16", "float32"]
BlockSize = Literal[1, 8, 16, 32, 64, 128]

# vLLM flags whose default is on: turning them off needs the explicit `--no-` form.
_ON_BY_DEFAULT = {
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "scheduler_reserve_full_isl",
    "async_scheduling",
}
# Flags that `vllm serve` takes under another spelling than the field name.
_FLAG_NAMES = {"served_model_name": "--served-model-name"}
# Flags kvbench itself sets on every worker: the address the probes, Services and load reach.
_OWN_FLAGS = ("--host", "--port", "--kv-events-config")

MAX_TOKENS = 2**24
"""More tokens than any model's context: a bound on every token count of the spec."""

_RESERVED_ENV = frozenset({"POD_IP", "POD_NAME", "HOME", "USER", "LOGNAME"})
"""Variables kvbench sets on every worker; `$(POD_IP)` in `--host` reads the first; USER and
LOGNAME name the pods' uid, which vLLM's image has no passwd entry for."""
_RESERVED_PREFIX = "KVBENCH_"
_DEV_MODE = "VLLM_SERVER_DEV_MODE"


class VllmFlags(SpecModel):
    """vLLM's serve flags as typed fields; unset means vLLM's own default."""

    served_model_name: LiteralArg | None = Field(
        None, min_length=1, max_length=512, description="--served-model-name"
    )
    max_model_len: int | None = Field(
        None, ge=16, le=MAX_TOKENS, description="--max-model-len (tokens)"
    )
    kv_cache_memory_bytes: ByteSize | None = Field(
        None,
        description="--kv-cache-memory-bytes: KV cache size per server, e.g. 1073741824 or 1Gi. "
        "Overrides gpuMemoryUtilization for the KV cache.",
    )
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="--gpu-memory-utilization (fraction of the GPU)"
    )
    kv_cache_dtype: KvCacheDtype | None = Field(None, description="--kv-cache-dtype")
    dtype: ModelDtype | None = Field(None, description="--dtype of the weights")
    block_size: BlockSize | None = Field(None, description="--block-size (tokens per KV block)")
    max_num_seqs: int | None = Field(None, ge=1, le=2**20, description="--max-num-seqs")
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="--max-num-batched-tokens (token budget per step, the chunk size)",
    )
    enable_prefix_caching: bool | None = Field(None, description="--[no-]enable-prefix-caching")
    enable_chunked_prefill: bool | None = Field(None, description="--[no-]enable-chunked-prefill")
    scheduler_reserve_full_isl: bool | None = Field(
        None,
        description="--[no-]scheduler-reserve-full-isl: admit a waiting request only when its "
        "whole prompt fits in the free KV blocks (vLLM's default: on)",
    )
    async_scheduling: bool | None = Field(
        None,
        description="--[no-]async-scheduling: decide the next batch while the current one runs, "
        "so an arrival waits one more step and finished requests free their blocks a step "
        "later (vLLM's default: on)",
    )
    enable_prompt_tokens_details: bool | None = Field(
        None,
        description="--enable-prompt-tokens-details: report cached tokens per response. kvbench "
        "turns it on unless set to false, or every request would look like a miss.",
    )
    enforce_eager: bool | None = Field(None, description="--enforce-eager (no CUDA graphs)")
    tensor_parallel_size: int | None = Field(
        None, ge=1, le=1024, description="--tensor-parallel-size"
    )
    seed: int | None = Field(None, ge=0, le=MAX_INT, description="--seed of the engine")

    def flag_values(self) -> dict[str, object]:
        """The flags that are set, by field name."""
        return {
            name: value
            for name in VllmFlags.model_fields
            if (value := getattr(self, name)) is not None
        }


class _ArgsAndEnv(VllmFlags):
    """What the engine and its variants both check: their extra args and env never take
    what kvbench sets on every worker."""

    @field_validator("extra_args", check_fields=False)
    @classmethod
    def _not_own_flags(cls, args: list[str]) -> list[str]:
        return _check_extra_args(args)

    @field_validator("env", check_fields=False)
    @classmethod
    def _not_own_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        return _check_env(env)


class EngineOverrides(_ArgsAndEnv):
    """What a variant may change of the engine: any flag, the image, extra args, extra env."""

    image: ImageRef | None = Field(None, description="Container image of this variant")
    extra_args: list[Arg] = Field(
        default_factory=list, max_length=256, description="Appended to the variant's arguments"
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=128, description="Added to (or replacing) env"
    )


class EngineSpec(_ArgsAndEnv):
    """The engine every worker runs: vLLM's OpenAI server, one per pod."""

    image: ImageRef = Field(
        "vllm/vllm-openai:v0.31.0", description="Container image running `vllm serve`"
    )
    model: LiteralArg = Field(
        ..., min_length=1, max_length=512, description="Model name or path, e.g. Qwen/Qwen3-0.6B"
    )
    port: int = Field(8000, ge=1, le=65535, description="Port of the OpenAI server and /metrics")
    extra_args: list[Arg] = Field(
        default_factory=list,
        max_length=256,
        description="More `vllm serve` arguments, passed as written (never --host or --port, "
        "never a flag a field above sets)",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=128, description="Environment of the engine"
    )
    model_cache: ModelCache | None = Field(
        None, description="Volume holding downloaded weights, shared across restarts"
    )
    hub_token_secret: SecretKeyRef | None = Field(
        None, description="Secret with a Hugging Face token, exported as HF_TOKEN"
    )

    @model_validator(mode="after")
    def _own_env_for_own_features(self) -> "EngineSpec":
        names = {var.name for var in self.env}
        if self.hub_token_secret is not None and "HF_TOKEN" in names:
            raise ValueError("env: HF_TOKEN comes from hubTokenSecret; set one of the two")
        if self.model_cache is not None and "HF_HOME" in names:
            raise ValueError("env: HF_HOME is modelCache.mountPath; set one of the two")
        return self

    @model_validator(mode="after")
    def _chunked_prefill_needs_room(self) -> "EngineSpec":
        if (
            self.enable_chunked_prefill is False
            and self.max_num_batched_tokens is not None
            and self.max_model_len is not None
            and self.max_num_batched_tokens < self.max_model_len
        ):
            raise ValueError(
                f"maxNumBatchedTokens ({self.max_num_batched_tokens}) is below maxModelLen "
                f"({self.max_model_len}) with enableChunkedPrefill false: vLLM refuses to start; "
                "raise maxNumBatchedTokens or enable chunked prefill"
            )
        return self

    def with_overrides(self, overrides: EngineOverrides | None) -> "EngineSpec":
        """This engine with a variant's overrides applied (validated again as a whole)."""
        if overrides is None:
            return self
        merged = self.model_dump()
        merged.update(overrides.flag_values())
        if overrides.image is not None:
            merged["image"] = overrides.image
        merged["extra_args"] = [*self.extra_args, *overrides.extra_args]
        replaced = {var.name for var in overrides.env}
        merged["env"] = [
            *(var.model_dump() for var in self.env if var.name not in replaced),
            *(var.model_dump() for var in overrides.env),
        ]
        return EngineSpec.model_validate(merged)

    @property
    def block_tokens(self) -> int:
        """Tokens per KV block (vLLM's default is 16)."""
        return self.block_size or 16

    def vllm_args(self) -> list[str]:
        """The `vllm serve` argument list: model first, then every set flag, then extraArgs."""
        args = [self.model, "--port", str(self.port)]
        flags = self.flag_values()
        flags.setdefault("enable_prompt_tokens_details", True)
        for name, value in flags.items():
            flag = _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
            if value is True:
                args.append(flag)
            elif value is False:
                if name in _ON_BY_DEFAULT:
                    args.append("--no-" + flag.removeprefix("--"))
            else:
                args += [flag, str(value)]
        return [*args, *self.extra_args]


def _typed_flags() -> dict[str, str]:
    """Every flag a VllmFlags field sets (both spellings of a boolean), to the field's name."""
    flags = {}
    for name, field in VllmFlags.model_fields.items():
        flag = _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        alias = field.alias or name
        flags[flag] = alias
        flags["--no-" + flag.removeprefix("--")] = alias
    return flags


_TYPED_FLAGS = _typed_flags()


def _check_extra_args(args: list[str]) -> list[str]:
    """Refuse what would override kvbench's own flags or a typed field.

    vLLM reads the last of repeated flags and argparse takes an unambiguous prefix
    (`--ho` for `--host`), so a prefix of an own flag is refused too."""
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if len(flag) > 2 and any(own.startswith(flag) for own in _OWN_FLAGS):
            raise ValueError(
                f"[{i}] {flag[:40]!r}: kvbench sets --host (the pod's IP, where probes and "
                "Services reach the server) and --port (engine.port) itself"
            )
        if flag in _TYPED_FLAGS:
            raise ValueError(f"[{i}] {flag}: set engine.{_TYPED_FLAGS[flag]} instead")
    return args


def _check_env(env: list[EnvVar]) -> list[EnvVar]:
    """Refuse variables kvbench sets itself, repeats, and a dev mode it cannot read."""
    seen: set[str] = set()
    for i, var in enumerate(env):
        if var.name in _RESERVED_ENV or var.name.startswith(_RESERVED_PREFIX):
            raise ValueError(
                f"[{i}] {var.name}: kvbench sets POD_IP, POD_NAME, HOME, USER, LOGNAME and "
                "KVBENCH_* itself (--host reads $(POD_IP))"
            )
        if var.name in seen:
            raise ValueError(f"[{i}] {var.name} is set twice")
        seen.add(var.name)
        if var.name == _DEV_MODE and var.value not in ("0", "1"):
            raise ValueError(
                f"[{i}] {_DEV_MODE} is '0' or '1', written as a value (freshness reset-cache "
                "reads it to know whether /reset_prefix_cache is served)"
            )
    return env
