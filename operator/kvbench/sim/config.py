"""Settings of one simulator process, as parsed from vLLM-style flags.

Fields use vLLM's names and defaults; ``None`` means "vLLM decides at start-up"
(``resolve`` in ``kvbench.sim.factory`` fills those in the way vLLM does).
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvbench.sim.gpu_share import MAX_WORKERS_PER_GPU
from kvbench.sim.hashing import HashAlgo

__all__ = ["KVEventsConfig", "SimConfig"]


class KVEventsConfig(BaseModel):
    """vLLM's ``--kv-events-config`` JSON (``vllm/config/kv_events.py``)."""

    model_config = ConfigDict(extra="ignore")

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def active(self) -> bool:
        """Whether a ZMQ publisher runs (vLLM: enabled, and publisher zmq or unset)."""
        return self.enable_kv_cache_events and (self.publisher or "zmq") == "zmq"


class SimConfig(BaseModel):
    """Everything ``kvbench sim`` was told; see docs/simulator.md for each flag."""

    model_config = ConfigDict(extra="forbid")

    host: str | None = None
    port: int = Field(default=8000, ge=0, le=65535)
    model: str = "Qwen/Qwen3-0.6B"
    served_model_name: list[str] | None = None
    max_model_len: int | None = Field(default=None, gt=0)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    dtype: Literal["auto", "bfloat16", "float16", "float32", "half", "float"] = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int = Field(default=16, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: HashAlgo = "sha256"
    enable_prompt_tokens_details: bool = False
    enforce_eager: bool = False
    max_cudagraph_capture_size: int | None = Field(default=None, ge=0)
    scheduler_reserve_full_isl: bool = True
    async_scheduling: bool = True
    kv_events_config: KVEventsConfig | None = None
    seed: int = 0
    tokenizer: str | None = None
    profile: str | None = None
    gpu_memory_bytes: int | None = Field(default=None, gt=0)
    time_scale: float = Field(default=1.0, ge=0)
    worker_id: str | None = None
    shared_gpu: str | None = None
    shared_gpu_slot: int | None = Field(default=None, ge=0, lt=MAX_WORKERS_PER_GPU)
    kv_capacity_jitter: float = Field(default=0.0, ge=0, lt=1)
    load_seconds: float = Field(default=0.0, ge=0)
    prefix_cache_stats_at: Literal["admission", "lookup"] = "admission"
    max_request_body_bytes: int | None = Field(default=None, gt=0)
    http_timeout_keep_alive: float = Field(default=5.0, gt=0)
    request_body_timeout: float = Field(default=60.0, gt=0)

    @field_validator("kv_events_config", mode="before")
    @classmethod
    def _parse_json(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value)
        return value

    @model_validator(mode="after")
    def _shared_gpu_needs_its_slot(self) -> SimConfig:
        if (self.shared_gpu is None) != (self.shared_gpu_slot is None):
            raise ValueError("--shared-gpu and --shared-gpu-slot go together")
        return self

    @property
    def served_model_names(self) -> list[str]:
        return self.served_model_name or [self.model]

    def body_limit(self, max_model_len: int) -> int:
        """``--max-request-body-bytes``, else 64 bytes per token of context (at least 1 MiB):
        room for a whole context as token ids or as text, so a larger body holds a prompt
        vLLM would refuse as too long, but not so much that decoding it stalls the loop."""
        return self.max_request_body_bytes or max(1 << 20, 64 * max_model_len)
