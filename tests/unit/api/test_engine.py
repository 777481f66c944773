"""Engine flags become `vllm serve` arguments; variants override them."""

import pytest

from kvbench.api import EngineOverrides, EngineSpec
from kvbench.api.units import parse_duration, parse_quantity


def test_article_002_flags() -> None:
    engine = EngineSpec(
        model="Qwen/Qwen3-0.6B",
        max_model_len=4096,
        kv_cache_memory_bytes="1Gi",
        gpu_memory_utilization=0.01,
    )
    assert engine.kv_cache_memory_bytes == 1073741824
    assert engine.vllm_args() == [
        "Qwen/Qwen3-0.6B",
        "--port",
        "8000",
        "--max-model-len",
        "4096",
        "--kv-cache-memory-bytes",
        "1073741824",
        "--gpu-memory-utilization",
        "0.01",
        "--enable-prompt-tokens-details",
    ]


def test_booleans_use_vllm_spellings() -> None:
    engine = EngineSpec(
        model="m",
        enable_prefix_caching=False,
        enforce_eager=True,
        enable_prompt_tokens_details=False,
        extra_args=["--trust-remote-code"],
    )
    args = engine.vllm_args()
    assert "--no-enable-prefix-caching" in args
    assert "--enforce-eager" in args
    assert "--enable-prompt-tokens-details" not in args
    assert args[-1] == "--trust-remote-code"


def test_the_admission_gate_is_turned_off_with_vllms_no_flag_and_the_simulator_takes_it() -> None:
    from kvbench.sim.args import parse_sim_args

    off = EngineSpec(model="m", scheduler_reserve_full_isl=False).vllm_args()
    assert "--no-scheduler-reserve-full-isl" in off
    assert not parse_sim_args(off[1:])[0].scheduler_reserve_full_isl
    on = EngineSpec(model="m", scheduler_reserve_full_isl=True).vllm_args()
    assert "--scheduler-reserve-full-isl" in on and "--no-scheduler-reserve-full-isl" not in on


def test_async_scheduling_is_turned_off_with_vllms_no_flag_and_the_simulator_takes_it() -> None:
    from kvbench.sim import build_engine
    from kvbench.sim.args import parse_sim_args

    off = EngineSpec(model="Qwen/Qwen3-0.6B", async_scheduling=False).vllm_args()
    assert "--no-async-scheduling" in off
    config = parse_sim_args(off[1:])[0]
    assert not config.async_scheduling
    assert not build_engine(config).core.async_scheduling
    default = parse_sim_args(EngineSpec(model="Qwen/Qwen3-0.6B").vllm_args()[1:])[0]
    assert build_engine(default).core.async_scheduling, "on by default, as in vLLM"


def test_overrides_replace_flags_and_env_and_append_args() -> None:
    base = EngineSpec.model_validate(
        {
            "model": "m",
            "maxNumSeqs": 64,
            "extraArgs": ["--a"],
            "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
        }
    )
    variant = EngineOverrides.model_validate(
        {
            "maxNumSeqs": 16,
            "kvCacheDtype": "fp8",
            "extraArgs": ["--b"],
            "env": [{"name": "Y", "value": "3"}],
        }
    )
    merged = base.with_overrides(variant)
    assert merged.max_num_seqs == 16 and merged.kv_cache_dtype == "fp8"
    assert merged.extra_args == ["--a", "--b"]
    assert {(v.name, v.value) for v in merged.env} == {("X", "1"), ("Y", "3")}
    assert base.max_num_seqs == 64, "the base engine is left unchanged"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("500M", 5 * 10**8),
        ("1073741824", 2**30),
        (4, 4),
        ("1.5Ki", 1536),
        ("2e3", 2000),
        ("250m", 0.25),
    ],
)
def test_quantities(text, value) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("250ms", 0.25), ("10m", 600), (5, 5.0)]
)
def test_durations(text, seconds) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["ten", "1d", "-5s", ""])
def test_bad_durations(text) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
