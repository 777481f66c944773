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
from kvbench.sim.engine import EngineCore, StepResult
from kvbench.sim.factory import build_engine
from kvbench.sim.gpu_share import FileGpuShare, GpuShare, InProcessGpu
from kvbench.sim.request import SimRequest
from kvbench.virtual.timeline import Timeline

PROMPT = 400
OUTPUT = 40


def _engine(gpu: GpuShare | None = None, profile: str = "roofline:a10g") -> EngineCore:
    config = SimConfig(
        model="Qwen/Qwen3-0.6B", max_model_len=2048, kv_cache_memory_bytes=260_000_000,
        gpu_memory_utilization=0.01, profile=profile,
    )  # fmt: skip
    core = build_engine(config, gpu=gpu).core
    core.stats.observe_latencies = False
    return core


def _busy(core: EngineCore, tag: int) -> SimRequest:
    prompt = [1000 * tag + i for i in range(PROMPT)]
    request = SimRequest(f"r{tag}", prompt, OUTPUT, arrival_time=0.0)
    core.add_request(request)
    return request


def _settled(core: EngineCore) -> StepResult:
    """The next step whose outputs are out (a step may take several calls: one that begins it,
    one when its GPU work is done, one that releases its outputs)."""
    while True:
        result = core.step()
        assert result is not None, "no step left"
        if result.settled:
            return result


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
def test_a_step_beyond_the_cuda_graphs_waits_out_captured_steps_and_shares_with_long_ones(
    prompt: int,
) -> None:
    """Catches a long prefill priced at the count of sharers (the old rule: 4x its GPU time
    beside three decoding workers, where real vLLM on an H200 took 1.2-1.5x; bench/results/
    real-vllm-0.25-h200-prefill.txt), long steps queued behind each other (the worker that
    started first then frees first, where real vLLM's eight concurrent misses on three workers
    reach their first tokens together), and a step CUDA graphs cover that stops being
    time-sliced. When this worker's first step starts, one other runs a captured step from 0
    to 10 ms, a third a long step of 30 ms of GPU work begun at 0."""
    gpu = InProcessGpu()
    core = _engine(gpu.member(0))
    gpu.member(1).occupy(0.0, 0.010)
    third = gpu.member(2)
    assert third.begin_long(0.0, 0.0, 0.030, 0.0, 0.0) == pytest.approx(0.030)
    core.add_request(SimRequest("r", list(range(1000, 1000 + prompt)), 2, arrival_time=0.0))
    step = core.step()
    assert step is not None and step.num_tokens == prompt
    cost = core.cost
    alone = cost.step_time(prompt, prompt, prompt * (prompt + 1) / 2)
    kernels = alone - cost.step_overhead
    if not cost.beyond_graphs(prompt):
        assert step.settled
        assert step.end - step.start == pytest.approx(3 * kernels + cost.step_overhead)
        return
    # It waits out the captured step (10 ms), then shares the GPU with the third's long step,
    # which has 20 ms left: the shorter of the two ends after twice its work, the longer after
    # both works.
    begin, left = 0.010, 0.020
    first, last = begin + 2 * min(left, kernels), begin + left + kernels
    ends_first = kernels < left
    assert not step.settled, "its end moves if another long step begins"
    assert step.end == pytest.approx((first if ends_first else last) + cost.step_overhead)
    assert third.long_end(0.0) == pytest.approx(last if ends_first else first)
    settled = core.step()
    assert settled is not None and settled.settled and settled.end == step.end
    assert core.scheduler.running[0].num_computed_tokens == prompt


@pytest.mark.parametrize("k", [2, 3])
def test_long_prefills_started_together_on_a_shared_gpu_end_together(k: int) -> None:
    """Catches long steps queued on a shared GPU (first tokens in a staircase, K, 2K, 3K:
    the old rule) rather than time-sliced against each other: k misses of one long prefill
    step each, one per worker at the same moment, all reach their first token when k of those
    steps' GPU work has run."""
    prompt = 1500
    gpu = InProcessGpu()
    cores = [_engine(gpu.member(slot)) for slot in range(k)]
    requests = []
    for i, core in enumerate(cores):
        request = SimRequest(f"r{i}", [1000 * (i + 1) + t for t in range(prompt)], 2,
                             arrival_time=0.0)  # fmt: skip
        core.add_request(request)
        requests.append(request)
    Timeline(cores, 0.0).run()
    own = _engine()
    alone = SimRequest("alone", list(range(prompt)), 2, arrival_time=0.0)
    own.add_request(alone)
    Timeline([own], 0.0).run()
    cost = own.cost
    assert cost.beyond_graphs(prompt)
    kernels = cost.step_time(prompt, prompt, prompt * (prompt + 1) / 2) - cost.step_overhead
    assert alone.first_token_time is not None
    for request in requests:
        assert request.first_token_time == pytest.approx(
            alone.first_token_time + (k - 1) * kernels, abs=1e-9
        ), [r.first_token_time for r in requests]


@pytest.mark.parametrize("profile", ["roofline:a10g", "qwen3-0.6b-h200"])
def test_decode_runs_equal_steps_one_by_one_beside_long_steps(profile: str) -> None:
    """Catches virtual time's fast path (decode steps in one call) running past another
    worker's long step whose end is not settled, or pricing its steps without it, or past a
    step whose outputs are held for the next step's launch (a profile whose long steps keep
    the GPU busy only part of the time): three workers on one GPU with long and short prompts
    arriving at different moments give the same token times stepping one step at a time."""

    def run(stepwise: bool) -> list[list[float]]:
        gpu = InProcessGpu()
        cores = [_engine(gpu.member(slot), profile) for slot in range(3)]
        requests = []
        for i in range(9):
            core = cores[i % 3]
            length = 1900 if i % 2 else 300
            request = SimRequest(f"r{i}", [10_000 * (i + 1) + t for t in range(length)], 30,
                                 arrival_time=0.007 * i)  # fmt: skip
            request.engine_arrival_time = request.arrival_time
            core.add_request(request)
            requests.append(request)
        Timeline(cores, 0.0, stepwise=stepwise).run()
        assert all(r.num_output_tokens == 30 for r in requests)
        return [r.token_times for r in requests]

    assert run(stepwise=False) == run(stepwise=True)


def test_a_request_aborted_while_its_long_step_runs_stays_aborted() -> None:
    """Catches a long step's outputs applied at its end to a request the client dropped while
    it ran (the shared GPU's long steps settle later than they start)."""
    gpu = InProcessGpu()
    core = _engine(gpu.member(0))
    request = SimRequest("r", list(range(1500)), 4, arrival_time=0.0)
    core.add_request(request)
    begun = core.step()
    assert begun is not None and not begun.settled
    core.abort(request)
    settled = core.step()
    assert settled is not None and settled.produced == [] and settled.finished == []
    assert request.num_output_tokens == 0 and request.first_token_time is None
    assert core.step() is None


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
    for share in (a, b, c):
        share.close()


def test_long_steps_share_the_gpu_through_the_file(tmp_path: Path) -> None:
    """Catches worker processes whose long steps do not see each other's (queued, or each
    alone), and a long step's end that does not move when another begins during it: two
    processes' long steps of 1 s each, the second begun half-way through the first, share the
    GPU from then on, whatever each worker's time scale."""
    path = tmp_path / "gpu0.share"
    a, b = FileGpuShare(path, 0), FileGpuShare(path, 1)
    origin = time.monotonic()
    a.bind(lambda v: origin + v)
    b.bind(lambda v: origin + 10 + v * 0.5)  # virtual 0 is wall origin+10
    assert a.begin_long(10.0, 0.0, 1.0, 0.25, 0.0) == pytest.approx(11.25), "alone: work, tail"
    assert a.others_running(10.5) == 0 and b.others_running(0.0) == 1
    # b begins at wall origin+10.5 with 1 s of GPU work (2 of its virtual seconds): a has 0.5
    # s left, and both run at half speed until a is done at 11.5; b, then alone, at 12.0.
    assert b.begin_long(1.0, 0.0, 2.0, 0.0, 0.0) == pytest.approx(4.0)
    assert a.others_remaining(10.6) == 0.0, "a long step shares, nothing to wait for"
    assert a.long_end(11.25) == pytest.approx(11.75), "its end moved: 11.5 plus its tail"
    assert a.long_end(11.75) == pytest.approx(11.75)
    assert b.long_end(4.0) == pytest.approx(4.0)
    assert a.others_running(11.9) == 1 and a.others_running(12.1) == 0
    c = FileGpuShare(path, 1)  # a restarted worker: its slot starts empty
    c.bind(lambda v: origin + v)
    assert a.others_running(11.9) == 0
    for share in (a, b, c):
        share.close()


def test_a_shared_gpu_flag_needs_its_slot_and_a_wall_clock() -> None:
    with pytest.raises(SystemExit):
        parse_sim_args(["--shared-gpu", "/tmp/x.share"])
    config, _ = parse_sim_args(["--shared-gpu", "/tmp/x.share", "--shared-gpu-slot", "2"])
    assert (config.shared_gpu, config.shared_gpu_slot) == ("/tmp/x.share", 2)
    assert math.isclose(config.time_scale, 1.0)


def test_long_steps_that_keep_the_gpu_busy_part_of_the_time_slow_each_other_only_past_it() -> None:
    """Catches a long step's host time counted as GPU time (real vLLM's 2,371-token misses on
    three workers of one H100 reached their first tokens no later than one alone on a slow
    host, bench/results/real-vllm-h100-together.txt) and GPU work not shared at all: three
    long steps of 1 s begun together, each keeping the GPU busy a share f of it, take
    max(1, 3 f) s."""
    for fraction, expected in ((0.25, 1.0), (0.5, 1.5), (1.0, 3.0)):
        gpu = InProcessGpu()
        members = [gpu.member(slot) for slot in range(3)]
        for member in members:
            member.begin_long(0.0, 0.0, fraction, 0.0, 1.0)
        assert [m.long_end(expected) for m in members] == pytest.approx([expected] * 3)


def test_the_next_step_is_decided_once_a_long_step_is_launched() -> None:
    """Catches async scheduling that decides the next step as a long one starts although its
    kernels are launched one by one for most of its time (vLLM schedules the next batch once
    the current one is submitted): a request that reaches the engine just after a 2,048-token
    chunk starts shares the next step, as on real vLLM (three 2,371-token misses at once on
    one worker: the first token 1.3 times one alone's, not 1.0)."""
    config = SimConfig(
        model="Qwen/Qwen3-0.6B", max_model_len=4096, kv_cache_memory_bytes=1 << 30,
        gpu_memory_utilization=0.01, profile="qwen3-0.6b-h200", max_num_batched_tokens=2048,
    )  # fmt: skip
    core = build_engine(config).core
    assert core.cost.uncaptured_gpu_fraction < 1
    for i, arrival in enumerate((0.0, 0.001)):
        request = SimRequest(f"r{i}", [1000 * (i + 1) + t for t in range(2371)], 2,
                             arrival_time=arrival)  # fmt: skip
        request.engine_arrival_time = arrival
        core.add_request(request)
    first, second = _settled(core), _settled(core)
    assert second.pipelined
    assert (first.num_tokens, first.num_requests) == (2048, 1)
    assert (second.num_tokens, second.num_requests) == (2048, 2), "r1 joins r0's last chunk"


@pytest.mark.timeout(10)
def test_long_steps_end_far_from_time_zero() -> None:
    """Catches processor sharing whose virtual time is summed up to a step's mark: on the
    wall clock's scale (monotonic seconds since boot, `FileGpuShare`) rounding leaves it short
    by more than any slack and the step never ends (a `kvbench sim` worker spun at 100 % CPU).
    Three long steps begun together at 100,000.1 s, 0.3 s of GPU work each."""
    gpu = InProcessGpu()
    members = [gpu.member(slot) for slot in range(3)]
    start = 100_000.1
    for member in members:
        member.begin_long(start, 0.0, 0.3, 0.0, start)
    assert [m.long_end(start + 0.9) for m in members] == pytest.approx([start + 0.9] * 3)
