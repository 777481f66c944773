"""KV capacity: vLLM's block arithmetic, its log lines, fp8, jitter, geometry sources."""

import json

import pytest

from kvbench.dynamo import mocker_kv_blocks
from kvbench.sim import SimConfig, build_engine
from kvbench.sim.args import parse_sim_args
from kvbench.sim.capacity import InsufficientKVCacheError, blocks_for_bytes, compute_capacity
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


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B", "Llama-3.2-1B"])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_blocks_for_bytes_is_the_rule_the_cache_is_sized_by(model, kv_cache_dtype):
    geometry = resolve_geometry(model)
    element = geometry.kv_element_bytes(kv_cache_dtype)
    blocks = blocks_for_bytes(geometry, GIB, block_size=16, kv_element_bytes=element)
    assert blocks == _cap(model, kv_cache_dtype=kv_cache_dtype).num_gpu_blocks
    assert blocks == GIB // (geometry.kv_bytes_per_token(element) * 16)


def test_an_auto_kv_cache_is_stored_in_the_model_dtype():
    geometry = resolve_geometry("Qwen/Qwen3-0.6B")
    assert geometry.page_bytes(16, geometry.kv_element_bytes()) == 2 * 16 * 8 * 128 * 2
    assert geometry.kv_element_bytes("auto", "float32") == 4
    assert geometry.kv_element_bytes("auto", "auto") == 2
    assert geometry.kv_element_bytes("fp8", "float32") == 1
    float32 = geometry.model_copy(update={"dtype": "float32"})
    assert float32.kv_element_bytes() == 4
    assert float32.kv_element_bytes("bfloat16") == 2


def _flags_blocks(*flags: str) -> tuple[int, list[str]]:
    """KV blocks of a simulator started with `serve Qwen/Qwen3-0.6B` and `flags`, and the
    flags it logged as ignored."""
    base = ["serve", "Qwen/Qwen3-0.6B", "--max-model-len", "4096"]
    config, ignored = parse_sim_args([*base, "--kv-cache-memory-bytes", "1G", *flags])
    return build_engine(config).capacity.num_gpu_blocks, ignored


@pytest.mark.parametrize(
    ("dtype", "element_bytes"),
    [("auto", 2), ("bfloat16", 2), ("float16", 2), ("half", 2), ("float32", 4), ("float", 4)],
)
def test_an_auto_kv_cache_follows_dtype_like_vllm_and_the_mocker(dtype, element_bytes):
    """vLLM stores an auto KV cache in --dtype: float32 weights make 4-byte KV elements, so
    the same bytes hold half the blocks; the mocker's block count follows the same flags."""
    bf16, _ = _flags_blocks("--dtype", "bfloat16")
    blocks, ignored = _flags_blocks("--dtype", dtype, "--kv-cache-dtype", "auto")
    assert ignored == []
    assert bf16 == 585
    assert blocks == (bf16 if element_bytes == 2 else bf16 // 2)
    assert blocks == mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "auto", dtype)


def test_an_explicit_kv_cache_dtype_ignores_dtype():
    fp8_float32, _ = _flags_blocks("--dtype", "float32", "--kv-cache-dtype", "fp8")
    fp8, _ = _flags_blocks("--kv-cache-dtype", "fp8")
    assert fp8_float32 == fp8 == mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "fp8", "float32")


def test_an_unknown_dtype_is_refused_like_vllm():
    with pytest.raises(SystemExit):
        parse_sim_args(["serve", "Qwen/Qwen3-0.6B", "--dtype", "int4"])


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
