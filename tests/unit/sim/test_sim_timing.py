"""Timing profiles and the roofline cost model."""

import pytest

from kvbench.sim.geometry import resolve_geometry
from kvbench.sim.timing import GPUS, CostModel, default_profile_name, resolve_profile


def _cost(profile="roofline:h100-80gb", model="Qwen/Qwen3-8B", eager=False):
    return CostModel(
        resolve_geometry(model), resolve_profile(profile), kv_dtype_bytes=2, enforce_eager=eager
    )


def test_every_gpu_has_a_roofline_profile_and_unknown_names_fail():
    for gpu in GPUS:
        assert resolve_profile(f"roofline:{gpu}").gpu_memory_bytes == GPUS[gpu].memory_bytes
    with pytest.raises(ValueError, match="unknown profile"):
        resolve_profile("roofline:abacus")


def test_default_profile_follows_the_model():
    assert default_profile_name(resolve_geometry("Qwen/Qwen3-1.7B")) == "qwen3-1.7b-8gb"
    assert default_profile_name(resolve_geometry("Qwen/Qwen3-0.6B")) == "qwen3-0.6b-24gb"
    assert default_profile_name(resolve_geometry("Qwen/Qwen3-8B")) == "roofline:a100-80gb"


def test_decode_is_memory_bound_and_prefill_compute_bound():
    cost = _cost()
    weights_only = cost.weight_bytes / cost.bandwidth + cost.step_overhead
    assert cost.step_time(1, 1, 1) == pytest.approx(weights_only, rel=0.01)
    # 4,096 prompt tokens cost far more than one decode; more context costs more.
    assert cost.step_time(4096, 4096, 4096 * 2048) > 5 * cost.step_time(1, 1, 1)
    assert cost.step_time(64, 64 * 4000, 64 * 4000) > cost.step_time(64, 64 * 100, 64 * 100)


def test_faster_gpu_is_faster():
    t4, h100 = _cost("roofline:t4"), _cost("roofline:h100-80gb")
    assert h100.step_time(2048, 2048, 2048 * 1024) < t4.step_time(2048, 2048, 2048 * 1024) / 5


def test_eager_mode_bounds_short_steps_by_kernel_launches():
    graphs, eager = _cost(model="Qwen/Qwen3-0.6B"), _cost(model="Qwen/Qwen3-0.6B", eager=True)
    assert eager.step_time(1, 1, 1) >= eager.eager_launch
    assert eager.step_time(1, 1, 1) > 1.3 * graphs.step_time(1, 1, 1)
    big = (8192, 8192, 8192 * 4096)
    assert eager.step_time(*big) == pytest.approx(graphs.step_time(*big), rel=0.05)


def test_a_mixed_step_pays_its_decodes_kv_on_top_of_the_prefill():
    """GEMMs and attention are separate kernels: a prefill chunk's GEMM compute does not hide
    the KV that the step's decodes read (one roofline over the whole step would)."""
    cost = _cost("qwen3-1.7b-8gb", "Qwen/Qwen3-1.7B")
    prefill = (512, 512, 512 * 256.5)
    decodes = (32, 32 * 601, 32 * 600)
    mixed = tuple(a + b for a, b in zip(prefill, decodes, strict=True))
    kv_read = decodes[1] * cost.kv_bytes_per_token / cost.attention_bandwidth
    assert cost.step_time(*mixed) - cost.step_time(*prefill) > kv_read


def test_attention_streams_kv_at_its_own_bandwidth():
    cost = _cost("qwen3-1.7b-8gb", "Qwen/Qwen3-1.7B")
    assert cost.attention_bandwidth < cost.bandwidth
    extra = 64 * 3900 * cost.kv_bytes_per_token / cost.attention_bandwidth
    longer = cost.step_time(64, 64 * 4000, 64 * 4000) - cost.step_time(64, 64 * 100, 64 * 100)
    assert longer == pytest.approx(extra, rel=1e-9)
    datasheet = _cost()
    assert datasheet.attention_bandwidth == datasheet.bandwidth


def test_a_step_no_cuda_graph_covers_takes_the_hosts_launch_time():
    """vLLM replays CUDA graphs only up to its capture size: a larger step's kernels are
    launched one by one, and under async scheduling the launch overlaps the previous step."""
    cost = _cost("roofline:h200", "Qwen/Qwen3-1.7B")
    cost.capture_limit = 128
    launch = cost.uncaptured_launch
    assert launch == pytest.approx(28 * 0.001)
    captured, uncaptured = (128, 128 * 600, 128 * 600.0), (129, 129 * 600, 129 * 600.0)
    assert cost.step_time(*captured) < launch / 2
    assert cost.step_time(*uncaptured) == pytest.approx(launch)
    behind_decode = cost.step_time(*uncaptured, head_start=0.003)
    assert behind_decode == pytest.approx(launch - 0.003)
    # Behind a step as long as the launch, only the step's own kernels are left.
    assert cost.step_time(*uncaptured, head_start=launch) == pytest.approx(
        cost.step_time(*captured), rel=0.02
    )
    # A prefill that runs longer than the launch hides it.
    prefill = (8192, 8192, 8192 * 4096.0)
    assert cost.step_time(*prefill) > launch
    hidden = cost.step_time(*prefill)
    cost.capture_limit = 8192
    assert cost.step_time(*prefill) == pytest.approx(hidden, rel=1e-9)


def test_the_capture_size_is_vllms():
    from kvbench.sim import SimConfig
    from kvbench.sim.args import parse_sim_args
    from kvbench.sim.factory import capture_limit

    assert capture_limit(SimConfig(), 64, 2048) == 128  # min(2 x max_num_seqs, 512)
    assert capture_limit(SimConfig(), 1024, 8192) == 512
    assert capture_limit(SimConfig(), 1024, 256) == 256  # never above the token budget
    told, _ = parse_sim_args(["--max-cudagraph-capture-size", "512"])
    assert capture_limit(told, 64, 2048) == 512
    assert capture_limit(SimConfig(enforce_eager=True), 64, 2048) == 0
