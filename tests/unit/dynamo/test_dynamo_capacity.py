"""Mocker block counts: the engine's model and KV dtype, equal to what `kvbench sim` reports."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.api import EngineSpec
from kvbench.dynamo import mocker_kv_blocks
from kvbench.sim import build_engine
from kvbench.sim.args import parse_sim_args
from kvbench.sim.metrics import render_metrics

GIB = 1 << 30


def sim_blocks(engine: EngineSpec) -> int:
    """`num_gpu_blocks` of `vllm:cache_config_info` on the /metrics page of a `kvbench sim`
    worker started with the engine's `vllm serve` arguments, as the local runner starts it."""
    config, _ = parse_sim_args(["serve", *engine.vllm_args()])
    sim = build_engine(config)
    _, render = render_metrics(
        sim.core.stats, sim.core.gauges, model_name="m", cache_info=sim.cache_config_info()
    )
    for family in text_string_to_metric_families(render().decode()):
        if family.name == "vllm:cache_config_info":
            return int(family.samples[0].labels["num_gpu_blocks"])
    raise AssertionError("no vllm:cache_config_info on the simulator's /metrics")


def mocker_blocks(engine: EngineSpec) -> int:
    assert engine.kv_cache_memory_bytes is not None
    return mocker_kv_blocks(
        engine.model,
        engine.kv_cache_memory_bytes,
        engine.block_tokens,
        engine.kv_cache_dtype,
        engine.dtype,
    )


def test_one_gib_on_qwen3_0_6b_is_585_blocks_of_16_and_fp8_twice_that() -> None:
    bf16 = mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, None, None)
    assert bf16 == 585
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "auto", None) == bf16
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "fp8", None) == 2 * bf16
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "fp8_e4m3", "bfloat16") == 2 * bf16
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 32, None, None) == 292


def test_an_auto_kv_cache_follows_the_dtype_flag() -> None:
    """vLLM stores an `auto` KV cache in the model's dtype, `--dtype` when given."""
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, None, "float32") == 292
    assert mocker_kv_blocks("Qwen/Qwen3-0.6B", GIB, 16, "fp8", "float32") == 1170


@pytest.mark.parametrize(
    ("model", "kv_cache_dtype", "blocks"),
    [
        ("Qwen/Qwen3-0.6B", None, 585),
        ("Qwen/Qwen3-0.6B", "fp8", 1170),
        ("Qwen/Qwen3-4B", None, 455),  # 36 layers
        ("Qwen/Qwen3-4B", "fp8_e5m2", 910),
        ("meta-llama/Llama-3.2-1B-Instruct", None, 2048),  # 16 layers, head_dim 64
    ],
)
def test_a_mocker_holds_what_a_sim_worker_holds(
    model: str, kv_cache_dtype: str | None, blocks: int
) -> None:
    engine = EngineSpec(
        model=model, kv_cache_memory_bytes=GIB, kv_cache_dtype=kv_cache_dtype, max_model_len=4096
    )
    assert mocker_blocks(engine) == sim_blocks(engine) == blocks


def test_block_size_and_bytes_come_from_the_flags() -> None:
    engine = EngineSpec(
        model="Qwen/Qwen3-4B", kv_cache_memory_bytes=3 * GIB, block_size=32, max_model_len=4096
    )
    assert mocker_blocks(engine) == sim_blocks(engine) == 682


def test_unknown_models_and_empty_caches_are_refused() -> None:
    with pytest.raises(ValueError, match="no geometry"):
        mocker_kv_blocks("nobody/unknown-model", GIB)
    with pytest.raises(ValueError, match="positive"):
        mocker_kv_blocks("Qwen/Qwen3-0.6B", 0)
