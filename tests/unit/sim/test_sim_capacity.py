"""KV capacity: vLLM's block arithmetic, its log lines, fp8, jitter, geometry sources."""

import json

import pytest

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.capacity import InsufficientKVCacheError, compute_capacity
from kvbench.sim.geometry import UnknownModelError, resolve_geometry

GIB = 1 << 30


def _cap(model="Qwen/Qwen3-0.6B", **kw):
    args = {
        "block_size": 16,
        "max_model_len": 4096,
        "kv_cache_memory_bytes": GIB,
        "gpu_memory_bytes": 24 * GIB,
        "gpu_memory_utilization": 0.01,
        "non_kv_overhead_bytes": 0,
    }
    return compute_capacity(resolve_geometry(model), **(args | kw))


def test_one_gib_on_qwen3_0_6b_is_585_blocks():
    cap = _cap()
    assert cap.page_size_bytes == 2 * 16 * 8 * 128 * 2
    assert cap.num_gpu_blocks == 585
    assert cap.num_tokens == 9360


def test_startup_lines_match_vllm_format():
    assert _cap().lines == [
        "Available KV cache memory: 1.00 GiB",
        "GPU KV cache size: 9,360 tokens",
        "Maximum concurrency for 4,096 tokens per request: 2.29x",
    ]


def test_bytes_per_token_of_qwen3_1_7b():
    geometry = resolve_geometry("Qwen/Qwen3-1.7B")
    assert geometry.kv_bytes_per_token(2) == 114_688


def test_fp8_holds_twice_the_tokens():
    bf16, fp8 = _cap(), _cap(kv_cache_dtype="fp8")
    assert fp8.num_gpu_blocks in (2 * bf16.num_gpu_blocks, 2 * bf16.num_gpu_blocks + 1)


def test_profiled_path_reproduces_article_capacity():
    sim = build_engine(SimConfig(model="Qwen/Qwen3-1.7B", max_model_len=4096))
    assert sim.profile.name == "qwen3-1.7b-8gb"
    assert sim.capacity.num_tokens == 22_048


def test_kv_cache_memory_bytes_overrides_utilization():
    low = _cap(gpu_memory_utilization=0.01)
    high = _cap(gpu_memory_utilization=0.9)
    assert low.num_gpu_blocks == high.num_gpu_blocks == 585


def test_jitter_is_seeded_and_bounded():
    def tokens(seed, jitter=0.1):
        cfg = SimConfig(
            model="Qwen/Qwen3-1.7B", max_model_len=4096, kv_capacity_jitter=jitter, seed=seed
        )
        return build_engine(cfg).capacity.num_tokens

    base = tokens(0, jitter=0.0)
    draws = {tokens(seed) for seed in range(8)}
    assert tokens(3) == tokens(3)
    assert len(draws) > 4
    assert all(0.85 * base <= t <= 1.15 * base for t in draws)


def test_too_little_memory_for_max_model_len_fails_like_vllm():
    with pytest.raises(InsufficientKVCacheError, match="max seq len"):
        _cap(kv_cache_memory_bytes=64 << 20, max_model_len=32768)


def test_geometry_from_local_config_json(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 10,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "hidden_size": 512,
                "intermediate_size": 1024,
                "vocab_size": 1000,
                "torch_dtype": "float16",
                "max_position_embeddings": 2048,
            }
        )
    )
    geometry = resolve_geometry(str(tmp_path))
    assert (geometry.num_layers, geometry.num_kv_heads, geometry.head_dim) == (10, 2, 64)
    assert geometry.kv_bytes_per_token(2) == 2 * 10 * 2 * 64 * 2


def test_hub_names_resolve_and_unknown_models_are_rejected():
    assert resolve_geometry("meta-llama/Llama-3.1-8B-Instruct").num_layers == 32
    assert resolve_geometry("Qwen/Qwen3-4B-FP8").weight_bytes_per_param == 1.0
    with pytest.raises(UnknownModelError):
        resolve_geometry("nobody/unknown-model")
