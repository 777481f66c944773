"""Workers sharing a GPU (`kvbench.sim.gpu_share`): a step CUDA graphs cover has its GPU time
multiplied by the number of workers on the GPU running a step when it starts, its host overhead
not; a step beyond the graphs waits out the others' running steps, then runs alone; in virtual
time and across `kvbench sim` processes on the wall clock alike."""

import itertools
import math
import time
from pathlib import Path

import pytest

from kvbench.sim.args import parse_sim_args
from kvbench.sim.config import SimConfig
from kvbench.sim.engine import EngineCore
from kvbench.sim.factory import build_engine
from kvbench.sim.gpu_share import FileGpuShare, GpuShare, InProcessGpu
from kvbench.sim.request import SimRequest
from kvbench.virtual.timeline import Timeline

PROMPT = 400
OUTPUT = 40


def _engine(gpu: GpuShare | None = None) -> EngineCore:
    config = SimConfig(
        model="Qwen/Qwen3-0.6B", max_model_len=2048, kv_cache_memory_bytes=260_000_000,
        gpu_memory_utilization=0.01, profile="roofline:a10g",
    )  # fmt: skip
    core = build_engine(config, gpu=gpu).core
    core.stats.observe_latencies = False
    return core


def _busy(core: EngineCore, tag: int) -> SimRequest:
    prompt = [1000 * tag + i for i in range(PROMPT)]
    request = SimRequest(f"r{tag}", prompt, OUTPUT, arrival_time=0.0)
    core.add_request(request)
    return request


def _decode_gaps(request: SimRequest) -> list[float]:
    times = request.token_times
    return [b - a for a, b in itertools.pairwise(times[1:])]


@pytest.mark.parametrize("stepwise", [True, False], ids=["stepwise", "decode-runs"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_k_busy_workers_on_one_gpu_take_k_times_the_gpu_time_each(k: int, stepwise: bool) -> None:
    """Catches a shared GPU that does not slow a step (the old simulator: every worker had a
    GPU of its own), one that slows the host overhead too, and decode runs (virtual time's
    fast path) that price a step without the other workers."""
    gpu = InProcessGpu()
    cores = [_engine(gpu.member(slot)) for slot in range(k)]
    requests = [_busy(core, i + 1) for i, core in enumerate(cores)]
    Timeline(cores, 0.0, stepwise=stepwise).run()
    cost = cores[0].cost
    for request in requests:
        assert request.num_output_tokens == OUTPUT
        # A decode step of one request whose context has `n` tokens, with k workers running.
        expected = [cost.step_time(1, n, float(n), k) for n in range(PROMPT + 2, PROMPT + OUTPUT)]
        gaps = _decode_gaps(request)
        # The workers start and finish a few steps apart (those steps run with fewer of them);
        # in the steady state between, every decode step of every worker is shared by all k.
        middle = slice(k + 1, -(k + 1))
        assert gaps[middle] == pytest.approx(expected[middle], rel=1e-9), f"k={k}"
    alone = cost.step_time(1, PROMPT + 10, float(PROMPT + 10))
    shared = cost.step_time(1, PROMPT + 10, float(PROMPT + 10), k)
    assert shared - cost.step_overhead == pytest.approx(k * (alone - cost.step_overhead))


def test_a_worker_alone_on_a_shared_gpu_runs_at_full_speed() -> None:
    """Catches a share counted by the workers placed on the GPU rather than by those running a
    step: an idle neighbour takes nothing."""
    gpu = InProcessGpu()
    busy, _idle = _engine(gpu.member(0)), _engine(gpu.member(1))
    request = _busy(busy, 1)
    Timeline([busy, _idle], 0.0).run()
    own = _engine()
    alone = _busy(own, 1)
    Timeline([own], 0.0).run()
    assert request.token_times == alone.token_times


@pytest.mark.parametrize("prompt", [100, 1500], ids=["captured", "beyond-the-graphs"])
def test_a_step_beyond_the_cuda_graphs_waits_out_the_others_and_runs_alone(prompt: int) -> None:
    """Catches a long prefill priced at the count of sharers (the old rule: 4x its GPU time
    beside three decoding workers, where real vLLM on an H200 took 1.2-1.5x; bench/results/
    real-vllm-0.25-h200-prefill.txt), a wait passed on from a step that is itself waiting
    (waits that compound: six workers' long prefills stalled for ever), and a step CUDA graphs
    cover that stops being time-sliced. When this worker's first step starts, one other runs a
    step from 0 to 10 ms, a third waits 25 ms of its 30 for others."""
    gpu = InProcessGpu()
    core = _engine(gpu.member(0))
    gpu.member(1).occupy(0.0, 0.010)
    gpu.member(2).occupy(0.0, 0.030, waiting=0.025)
    core.add_request(SimRequest("r", list(range(1000, 1000 + prompt)), 2, arrival_time=0.0))
    step = core.step()
    assert step is not None and step.num_tokens == prompt
    cost = core.cost
    alone = cost.step_time(prompt, prompt, prompt * (prompt + 1) / 2)
    kernels = alone - cost.step_overhead
    if cost.beyond_graphs(prompt):
        assert step.end - step.start == pytest.approx(0.010 + 0.005 + kernels + cost.step_overhead)
    else:
        assert step.end - step.start == pytest.approx(3 * kernels + cost.step_overhead)


def test_shared_gpu_slots_are_distinct() -> None:
    gpu = InProcessGpu()
    gpu.member(0)
    with pytest.raises(ValueError, match="slot 0"):
        gpu.member(0)


def test_processes_share_through_the_file_on_the_wall_clock(tmp_path: Path) -> None:
    """Catches worker processes that do not see each other's steps: another slot's step that
    ends after this worker's moment counts, one that has ended does not, and virtual times
    are compared as wall times through each worker's own mapping."""
    path = tmp_path / "gpu0.share"
    a, b, c = FileGpuShare(path, 0), FileGpuShare(path, 1), FileGpuShare(path, 5)
    origin = time.monotonic()
    a.bind(lambda v: origin + v)  # time scale 1
    b.bind(lambda v: origin + 100 + v * 0.5)  # started later, time scale 0.5
    c.bind(lambda v: origin + v)
    assert a.others_running(0.0) == 0, "fresh slots are idle"
    b.occupy(0.0, 4.0)  # wall origin+100 .. origin+102
    assert a.others_running(101.0) == 1
    assert a.others_running(102.5) == 0
    c.occupy(100.0, 103.0)
    assert a.others_running(101.0) == 2
    assert b.others_running(1.0) == 1, "its own step is not another's"
    # Left of b's and c's steps at wall origin+101: 1 s and 2 s, in a's virtual seconds (time
    # scale 1) and in b's (0.5 wall seconds per virtual one: c's 2 s are 4 of b's).
    assert a.others_remaining(101.0) == pytest.approx(3.0)
    assert b.others_remaining(2.0) == pytest.approx(4.0)
    c.occupy(100.0, 103.0, waiting=2.5)  # its own work: the last 0.5 s
    assert a.others_remaining(101.0) == pytest.approx(1.5), "a wait is not passed on"
    for share in (a, b, c):
        share.close()


def test_a_shared_gpu_flag_needs_its_slot_and_a_wall_clock() -> None:
    with pytest.raises(SystemExit):
        parse_sim_args(["--shared-gpu", "/tmp/x.share"])
    config, _ = parse_sim_args(["--shared-gpu", "/tmp/x.share", "--shared-gpu-slot", "2"])
    assert (config.shared_gpu, config.shared_gpu_slot) == ("/tmp/x.share", 2)
    assert math.isclose(config.time_scale, 1.0)
