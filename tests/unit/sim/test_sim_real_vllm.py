"""Figures measured on real vLLM 0.25.0 on an H200 (shared/reference/real-vllm-0.25-h200.md),
reproduced in virtual time: preemptions under KV pressure with the full-prompt admission gate
on (vLLM's default) and off, and article 002's layout behind a Service.

These are predictions, not fits: the simulator's timing profiles were fitted to the articles'
figures, never to these runs. Tolerances are stated per row before the run.
"""

import random
import statistics
from collections.abc import Callable

import pytest

from kvbench.api import BenchmarkExperiment, load_experiment
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload import build_sequence
from kvbench.plan import PlannedRun, plan_experiment
from kvbench.sim import SimConfig, build_engine
from kvbench.sim.engine import EngineCore
from kvbench.sim.replay import run_closed_loop, run_routed_closed_loop
from kvbench.sim.request import SimRequest


def _prompts(seed: int, n: int, length: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, 150000) for _ in range(length)] for _ in range(n)]


KV_22048, KV_27504 = 2_528_641_024, 3_154_378_752
"""`--kv-cache-memory-bytes` that give Qwen3-1.7B 22,048 and 27,504 tokens (both sides)."""

# (KV bytes, input, output, concurrency, real default, real gate off, tolerance)
PREEMPTIONS = [
    (KV_22048, 2048, 128, 32, 0, 0, 0),
    (KV_22048, 1500, 256, 64, 21, 22, 1),
    (KV_22048, 512, 128, 32, 0, 0, 0),
    (KV_27504, 2048, 128, 32, 6, 8, 1),
    (KV_27504, 1500, 256, 64, 20, 24, 1),
]


def _preemptions(kv_bytes: int, inp: int, out: int, conc: int, gate: bool) -> int:
    """Article 000's shape on one Qwen3-1.7B server (--max-num-seqs 64, 2,048 batched
    tokens), two requests per unit of concurrency, as the real runs had."""
    sim = build_engine(
        SimConfig(
            model="Qwen/Qwen3-1.7B", max_model_len=4096, max_num_seqs=64,
            max_num_batched_tokens=2048, kv_cache_memory_bytes=kv_bytes,
            gpu_memory_utilization=0.1, profile="qwen3-1.7b-8gb",
            scheduler_reserve_full_isl=gate,
        )
    )  # fmt: skip
    done = run_closed_loop(sim.core, _prompts(0, 2 * conc, inp), concurrency=conc, max_tokens=out)
    return sum(r.num_preemptions for r in done)


@pytest.mark.parametrize(("kv", "inp", "out", "conc", "real", "real_off", "tol"), PREEMPTIONS)
def test_preemptions_match_real_vllm_with_the_gate_on_and_off(
    kv: int, inp: int, out: int, conc: int, real: int, real_off: int, tol: int
) -> None:
    assert _preemptions(kv, inp, out, conc, gate=True) == pytest.approx(real, abs=tol)
    assert _preemptions(kv, inp, out, conc, gate=False) == pytest.approx(real_off, abs=tol)


Row = tuple[int, float, float, int, int]


def _article_002(gate: bool) -> list[Row]:
    """Every run of examples/prefix-cache-service.yaml at concurrency 8 (the real runs' cut),
    on six simulated workers behind a seeded random Service: (prefixes, request hit rate as
    reported, hit rate of the first admissions, preemptions, requests)."""
    experiment = load_experiment("examples/prefix-cache-service.yaml")
    experiment.spec.load.concurrency = [8]
    return [_run(experiment, run, gate) for run in plan_experiment(experiment).runs]


def _run(experiment: BenchmarkExperiment, run: PlannedRun, gate: bool) -> Row:
    cores: list[EngineCore] = []
    first: dict[str, int] = {}
    for pool in experiment.spec.workers:
        for _ in range(pool.replicas):
            core = build_engine(
                SimConfig(
                    model="Qwen/Qwen3-0.6B", max_model_len=4096,
                    kv_cache_memory_bytes=1 << 30, gpu_memory_utilization=0.01,
                    profile=pool.simulation.profile, scheduler_reserve_full_isl=gate,
                )
            ).core  # fmt: skip
            core.kv.record_prefix_cache_stats = _first_hits(core, first)  # type: ignore[method-assign]
            cores.append(core)
    spec = experiment.spec
    sequence = build_sequence(spec.workload, run.point, run.seed, spec.load.warmup, TokenSpace())
    rng = random.Random(f"{spec.load.seed}/service/r{run.index}")

    def send(prompts: list, start: float, label: str) -> tuple[list, float]:
        return run_routed_closed_loop(
            cores, prompts, route=lambda: rng.randrange(len(cores)), concurrency=8,
            max_tokens=64, start=start, label=label,
        )  # fmt: skip

    _, end = send([r.prompt for r in sequence.warmup], 0.0, "warmup")
    measured, _ = send([r.prompt for r in sequence.measured], end, "measured")
    requests = [r for r, _ in measured]
    return (
        run.point.prefixes,
        sum(r.num_cached_tokens > 0 for r in requests) / len(requests),
        sum(first[r.request_id] > 0 for r in requests) / len(requests),
        sum(c.scheduler.num_preemptions for c in cores),
        len(requests),
    )


def _first_hits(core: EngineCore, first: dict[str, int]) -> Callable[[SimRequest, int], None]:
    record = core.kv.record_prefix_cache_stats

    def recorded(request: SimRequest, num_hit: int) -> None:
        first.setdefault(request.request_id, num_hit)
        record(request, num_hit)

    return recorded


@pytest.fixture(scope="module")
def article_002() -> dict[bool, list[Row]]:
    return {gate: _article_002(gate) for gate in (True, False)}


def test_article_002_preempts_as_little_as_real_vllm_with_the_gate(article_002) -> None:
    """Real vLLM: 0 preemptions in all 12 runs; the simulator without the gate (as it was)
    preempted in most of them."""
    assert [row[3] for row in article_002[True]] == [0] * 12
    assert sum(row[3] > 0 for row in article_002[False]) >= 6


def test_article_002_keeps_its_hit_rates_with_the_gate(article_002) -> None:
    """The gate changes when requests are admitted, hardly which ones hit: each run's hit rate
    is within one request of what the simulator reported before it had the gate, which matched
    real vLLM run by run on identical digests (medians 95.0 / 54.5 / 31.7 / 16.0 %)."""
    on, off = article_002[True], article_002[False]
    for gated, before in zip(on, off, strict=True):
        assert abs(gated[1] - before[2]) * gated[4] <= 1, "within one request"
    medians = {p: statistics.median(row[1] for row in on if row[0] == p) for p in (2, 7, 12, 24)}
    assert medians[2] == pytest.approx(0.95, abs=0.001)
    assert medians[2] > medians[7] > medians[12] > medians[24]


def test_without_the_gate_each_preemption_before_the_first_token_adds_a_hit(article_002) -> None:
    """Real vLLM with --no-scheduler-reserve-full-isl: a request preempted before its first
    token reports its re-admission's cached tokens, so its own blocks make it a hit (at most
    one hit per preemption)."""
    added = []
    for _, reported, first, preemptions, requests in article_002[False]:
        extra = round((reported - first) * requests)
        assert 0 <= extra <= preemptions
        added.append(extra)
    assert sum(added) > 0


REAL_C32_TOKS = (7137, 7134, 7351, 7131, 7039)
REAL_C64_TOKS = (6483, 7317, 6566, 6354, 6567, 7122)
"""Real vLLM 0.25 on an H200, Qwen3-1.7B (dummy weights), `bench/real_vllm_steps.py --real`
on three server starts (bench/results/real-vllm-0.25-h200-steps.txt): output tokens per
second at 32 and 64 (one run at 32, 5,819, the first after a start, left out)."""


def _throughput(concurrency: int) -> float:
    sim = build_engine(
        SimConfig(
            model="Qwen/Qwen3-1.7B", max_model_len=4096, max_num_seqs=64,
            max_num_batched_tokens=2048, kv_cache_memory_bytes=KV_22048,
            gpu_memory_utilization=0.1, profile="roofline:h200",
        )
    )  # fmt: skip
    prompts = _prompts(concurrency, 4 * concurrency, 512)
    done = run_closed_loop(sim.core, prompts, concurrency=concurrency, max_tokens=128)
    return sum(r.num_output_tokens for r in done) / max(r.finish_time for r in done)


def test_throughput_falls_from_32_to_64_as_on_the_h200() -> None:
    """At 64 the KV-full batch admits short prefill chunks one at a time, each a step above
    the CUDA-graph capture size (128) right after a 3 ms decode step: async scheduling cannot
    hide its launch time. Its launch time per layer was measured on the steps with async
    scheduling off; the fall with it on is the prediction (it rose 7 % without it)."""
    real = statistics.mean(REAL_C64_TOKS) / statistics.mean(REAL_C32_TOKS)
    ratio = _throughput(64) / _throughput(32)
    assert ratio < 1.0
    assert ratio == pytest.approx(real, abs=0.05)
