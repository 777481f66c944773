"""Model geometry: the numbers that decide KV bytes per token and compute per token.

vLLM reads these from the model's ``config.json``. The simulator has no weights, so it
keeps a table of the models the project benchmarks and also reads a local
``config.json`` when ``--model`` names a directory, exactly the fields vLLM uses.
This is kvbench's one source of KV geometry: the simulator's cache, the Dynamo mockers'
block counts and the config.json written for them all read it from here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "KNOWN_MODELS",
    "ModelGeometry",
    "UnknownModelError",
    "dtype_bytes",
    "resolve_geometry",
]

_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name as vLLM spells it (``auto`` is not a dtype)."""
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


class UnknownModelError(ValueError):
    """The model is neither in the built-in table nor a directory with a config.json."""


class ModelGeometry(BaseModel):
    """Architecture numbers of a decoder-only transformer (what vLLM's KV spec needs)."""

    model_config = ConfigDict(frozen=True)

    name: str
    num_layers: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    dtype: str = "bfloat16"
    weight_bytes_per_param: float = 2.0
    max_position_embeddings: int = 40960

    @property
    def num_params(self) -> int:
        """Parameter count (dense: attention + gated MLP + embeddings, norms ignored)."""
        q = self.hidden_size * self.num_attention_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        embed = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embed
        return self.num_layers * (q + kv + o + mlp) + embed + lm_head

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights read per forward pass."""
        return int(self.num_params * self.weight_bytes_per_param)

    def kv_element_bytes(self, kv_cache_dtype: str = "auto", dtype: str | None = None) -> int:
        """Bytes of one K or V element. vLLM's ``--kv-cache-dtype auto`` stores the model's
        dtype: ``--dtype`` when it is set to one, else config.json's."""
        if kv_cache_dtype != "auto":
            return dtype_bytes(kv_cache_dtype)
        if dtype is not None and dtype != "auto":
            return dtype_bytes(dtype)
        return dtype_bytes(self.dtype)

    def page_bytes(self, block_size: int, kv_element_bytes: int) -> int:
        """Bytes of K and V for one block in one layer (vLLM's page size)."""
        return 2 * block_size * self.num_kv_heads * self.head_dim * kv_element_bytes

    def kv_bytes_per_token(self, kv_element_bytes: int) -> int:
        """KV cache bytes one token holds across all layers (K and V)."""
        return self.num_layers * self.page_bytes(1, kv_element_bytes)

    @property
    def flops_per_token(self) -> float:
        """Dense FLOPs of one token through the network (2 per multiply-add)."""
        return 2.0 * self.num_params

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs for one (query token, context token) pair: QK^T and AV in every layer."""
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_dim


def _g(name: str, **kw: object) -> ModelGeometry:
    return ModelGeometry(name=name, **kw)  # type: ignore[arg-type]


KNOWN_MODELS: dict[str, ModelGeometry] = {
    g.name.lower(): g
    for g in (
        _g(
            "Qwen3-0.6B",
            num_layers=28,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=16,
            hidden_size=1024,
            intermediate_size=3072,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
        _g(
            "Qwen3-1.7B",
            num_layers=28,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=16,
            hidden_size=2048,
            intermediate_size=6144,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
        _g(
            "Qwen3-4B",
            num_layers=36,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=32,
            hidden_size=2560,
            intermediate_size=9728,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
        _g(
            "Qwen3-4B-FP8",
            num_layers=36,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=32,
            hidden_size=2560,
            intermediate_size=9728,
            vocab_size=151936,
            tie_word_embeddings=True,
            weight_bytes_per_param=1.0,
        ),
        _g(
            "Qwen3-8B",
            num_layers=36,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=32,
            hidden_size=4096,
            intermediate_size=12288,
            vocab_size=151936,
        ),
        _g(
            "Qwen3-14B",
            num_layers=40,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=40,
            hidden_size=5120,
            intermediate_size=17408,
            vocab_size=151936,
        ),
        _g(
            "Qwen3-32B",
            num_layers=64,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=64,
            hidden_size=5120,
            intermediate_size=25600,
            vocab_size=151936,
        ),
        _g(
            "Llama-3.2-1B",
            num_layers=16,
            num_kv_heads=8,
            head_dim=64,
            num_attention_heads=32,
            hidden_size=2048,
            intermediate_size=8192,
            vocab_size=128256,
            tie_word_embeddings=True,
            max_position_embeddings=131072,
        ),
        _g(
            "Llama-3.2-3B",
            num_layers=28,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=24,
            hidden_size=3072,
            intermediate_size=8192,
            vocab_size=128256,
            tie_word_embeddings=True,
            max_position_embeddings=131072,
        ),
        _g(
            "Llama-3.1-8B",
            num_layers=32,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=32,
            hidden_size=4096,
            intermediate_size=14336,
            vocab_size=128256,
            max_position_embeddings=131072,
        ),
        _g(
            "Llama-3.1-70B",
            num_layers=80,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=64,
            hidden_size=8192,
            intermediate_size=28672,
            vocab_size=128256,
            max_position_embeddings=131072,
        ),
        _g(
            "Mistral-7B-v0.3",
            num_layers=32,
            num_kv_heads=8,
            head_dim=128,
            num_attention_heads=32,
            hidden_size=4096,
            intermediate_size=14336,
            vocab_size=32768,
            max_position_embeddings=32768,
        ),
    )
}

_SUFFIXES = ("-instruct", "-base", "-chat", "-hf")
_ALIASES = {"meta-llama-3.1-8b": "llama-3.1-8b", "meta-llama-3.1-70b": "llama-3.1-70b"}


def _table_key(model: str) -> str:
    key = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in _SUFFIXES:
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return _ALIASES.get(key, key)


def _from_config_json(path: Path, name: str) -> ModelGeometry:
    """Read the fields vLLM reads from a Hugging Face ``config.json``."""
    cfg = json.loads(path.read_text())
    cfg = cfg.get("text_config", cfg)
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    quant = cfg.get("quantization_config") or {}
    weight_bytes = 1.0 if "fp8" in str(quant.get("quant_method", "")).lower() else None
    return ModelGeometry(
        name=name,
        num_layers=int(cfg["num_hidden_layers"]),
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        num_attention_heads=heads,
        hidden_size=hidden,
        intermediate_size=int(cfg.get("intermediate_size") or 4 * hidden),
        vocab_size=int(cfg.get("vocab_size", 32000)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype,
        weight_bytes_per_param=weight_bytes or float(dtype_bytes(dtype)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
    )


def resolve_geometry(model: str) -> ModelGeometry:
    """Geometry for ``--model``: a local directory's config.json first, then the table."""
    path = Path(model)
    if path.is_file() and path.name == "config.json":
        return _from_config_json(path, path.parent.name)
    if (path / "config.json").is_file():
        return _from_config_json(path / "config.json", path.name)
    try:
        return KNOWN_MODELS[_table_key(model)]
    except KeyError:
        known = ", ".join(sorted(g.name for g in KNOWN_MODELS.values()))
        raise UnknownModelError(
            f"no geometry for model {model!r}: pass a directory with a config.json "
            f"or one of: {known}"
        ) from None
