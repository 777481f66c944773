"""The model directory Dynamo's frontend and mocker both read: tokenizer, chat template, config.

No model can be downloaded here, and neither process needs weights: the frontend needs a
tokenizer (and a chat template for /v1/chat/completions) and the mocker needs a config.json
to size KV blocks. So kvbench trains a byte-level BPE tokenizer with the `tokenizers`
library on text generated from a seed (same seed, same files), adds Qwen's ChatML
special tokens and chat template, and writes a Qwen3-architecture config.json with the
served model's geometry (`kvbench.sim.geometry`, Qwen3-0.6B unless told otherwise) and the
tokenizer's vocab size, so the mocker's own KV arithmetic sees the engine's model.

The directory is cached: it is named by a digest of its inputs and written once, through a
temporary directory renamed into place, so concurrent callers never see a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from kvbench.sim.geometry import ModelGeometry, resolve_geometry

__all__ = ["CHAT_TEMPLATE", "ModelDir", "ModelDirSpec", "ensure_model_dir"]

FORMAT_VERSION = 2
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class ModelDirSpec(BaseModel):
    """What the directory holds; equal specs give byte-identical directories."""

    model_config = ConfigDict(frozen=True)

    seed: int = 0
    vocab_size: int = Field(
        32768,
        ge=1024,
        description="Tokenizer (and config.json) vocabulary; above kvbench's token-id space",
    )
    geometry: ModelGeometry = Field(
        default_factory=lambda: resolve_geometry("Qwen/Qwen3-0.6B"),
        description="The served model's layers, heads and dtype, written into config.json",
    )

    def digest(self) -> str:
        """Short content address of this spec (and of the file format version)."""
        payload = json.dumps([FORMAT_VERSION, self.model_dump()], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


class ModelDir(BaseModel):
    """A written model directory."""

    model_config = ConfigDict(frozen=True)

    path: Path
    spec: ModelDirSpec
    vocab_size: int = Field(description="What the tokenizer holds, special tokens included")

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"


def _corpus(seed: int, words: int) -> list[str]:
    """Lines of seeded pseudo-words: varied enough for BPE to learn ~`words` merges."""
    rng = random.Random(f"kvbench-dynamo-tokenizer/{seed}")
    lexicon = [
        "".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(words)
    ]
    return [" ".join(rng.choice(lexicon) for _ in range(64)) for _ in range(words // 8)]


def _train_tokenizer(spec: ModelDirSpec) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(spec.seed, spec.vocab_size * 2), trainer=trainer)
    return tokenizer


def _config_json(spec: ModelDirSpec, vocab_size: int, eos_id: int, bos_id: int) -> dict:
    """A Qwen3ForCausalLM config.json with the spec's geometry and the tokenizer's vocab."""
    geometry = spec.geometry
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": geometry.hidden_size,
        "intermediate_size": geometry.intermediate_size,
        "num_hidden_layers": geometry.num_layers,
        "num_attention_heads": geometry.num_attention_heads,
        "num_key_value_heads": geometry.num_kv_heads,
        "head_dim": geometry.head_dim,
        "max_position_embeddings": geometry.max_position_embeddings,
        "vocab_size": vocab_size,
        "torch_dtype": geometry.dtype,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "tie_word_embeddings": geometry.tie_word_embeddings,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
    }


def _write(spec: ModelDirSpec, target: Path) -> None:
    tokenizer = _train_tokenizer(spec)
    tokenizer.save(str(target / "tokenizer.json"))
    eos_id = tokenizer.token_to_id("<|im_end|>")
    bos_id = tokenizer.token_to_id("<|endoftext|>")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": spec.geometry.max_position_embeddings,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    generation_config = {"bos_token_id": bos_id, "eos_token_id": [eos_id]}
    files = {
        "tokenizer_config.json": tokenizer_config,
        "config.json": _config_json(spec, tokenizer.get_vocab_size(), eos_id, bos_id),
        "generation_config.json": generation_config,
    }
    for name, content in files.items():
        (target / name).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


def ensure_model_dir(cache_dir: Path, spec: ModelDirSpec | None = None) -> ModelDir:
    """The model directory for `spec` under `cache_dir`, written on first use."""
    spec = spec or ModelDirSpec()
    path = cache_dir / f"model-{spec.digest()}"
    if not (path / "config.json").is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".model-", dir=cache_dir))
        try:
            _write(spec, staging)
            try:
                os.rename(staging, path)
            except OSError:
                if not (path / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    config = json.loads((path / "config.json").read_text())
    return ModelDir(path=path, spec=spec, vocab_size=config["vocab_size"])
