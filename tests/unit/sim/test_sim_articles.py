"""The articles' measurements (shared/seeds/DIGEST.md), reproduced in virtual time.

Each test runs the engine core with virtual clients (no HTTP, no wall clock), so the
figures are exact; tolerances are on the articles' numbers, ratios where the articles
give ratios.
"""

import itertools
import random

import pytest

from kvbench.sim import SimConfig, build_engine
from kvbench.sim.replay import run_closed_loop, run_open_loop, summarize_replay

GIB = 1 << 30


def _engine(**kw):
    base = {"model": "Qwen/Qwen3-1.7B", "max_model_len": 4096, "max_num_seqs": 64}
    return build_engine(SimConfig(**(base | kw)))


def _prompts(seed, n, length):
    rng = random.Random(seed)
    return [[rng.randrange(1000, 150000) for _ in range(length)] for _ in range(n)]


def _closed(conc, n, inp, out, **kw):
    sim = _engine(**kw)
    return summarize_replay(
        run_closed_loop(sim.core, _prompts(conc, n, inp), concurrency=conc, max_tokens=out)
    )


@pytest.fixture(scope="module")
def sweep():
    """Input 512 / output 128 at concurrency 1, 8, 32, 64 with ~22k tokens of KV."""
    return {c: _closed(c, max(4 * c, 16), 512, 128) for c in (1, 8, 32, 64)}


def test_capacity_is_the_articles_22k_tokens():
    assert _engine().capacity.num_tokens == 22_048


def test_single_stream_decode_speed(sweep):
    assert sweep[1].output_throughput == pytest.approx(66, rel=0.07)
    assert sweep[1].median_itl == pytest.approx(0.015, rel=0.07)


def test_throughput_scales_then_flattens_while_ttft_explodes(sweep):
    assert sweep[8].output_throughput / sweep[1].output_throughput == pytest.approx(5.8, rel=0.1)
    assert sweep[32].output_throughput == pytest.approx(831, rel=0.1)
    # 64 x 640 tokens exceed the 22,048-token cache: requests queue.
    assert sweep[64].output_throughput == pytest.approx(sweep[32].output_throughput, rel=0.1)
    assert sweep[64].median_ttft / sweep[32].median_ttft > 5
    assert sweep[64].median_ttft == pytest.approx(5.7, rel=0.25)


def test_prefill_steps_interrupt_decoding(sweep):
    assert sweep[32].median_itl == pytest.approx(0.025, rel=0.2)
    assert sweep[32].p99_itl == pytest.approx(0.22, rel=0.25)


def test_more_kv_capacity_cuts_queueing_at_64():
    small = _closed(64, 256, 512, 128)
    # A restart with more memory free (the articles' 26,560-token start): TTFT 2.7x better.
    large = _closed(64, 256, 512, 128, gpu_memory_bytes=int(8.2 * GIB))
    assert large.median_ttft < small.median_ttft / 1.8


def test_long_inputs_at_high_concurrency_preempt_and_short_ones_do_not():
    short = _closed(32, 64, 512, 128)
    long = _closed(64, 128, 1500, 256)
    assert short.num_preemptions == 0
    assert long.num_preemptions == pytest.approx(22, abs=8)
    assert long.median_ttft == pytest.approx(35.4, rel=0.15)


def test_max_num_seqs_below_capacity_costs_throughput():
    full = _closed(64, 256, 512, 128)
    capped = _closed(64, 256, 512, 128, max_num_seqs=16)
    assert capped.output_throughput / full.output_throughput == pytest.approx(0.77, abs=0.08)
    assert capped.median_ttft / full.median_ttft == pytest.approx(1.8, rel=0.2)


def _prefix_ttfts(**kw):
    sim = _engine(**kw)
    rng = random.Random(1)
    shared = [rng.randrange(1000, 150000) for _ in range(3000)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(32)] for _ in range(4)]
    done = run_closed_loop(sim.core, prompts, concurrency=1, max_tokens=1)
    return [r.token_times[0] - r.arrival_time for r in done], done


def test_shared_prefix_makes_ttft_an_order_of_magnitude_faster():
    ttfts, done = _prefix_ttfts()
    miss, hits = ttfts[0], ttfts[1:]
    assert miss == pytest.approx(0.394, rel=0.1)
    assert all(h == pytest.approx(0.028, rel=0.2) for h in hits)
    assert miss / max(hits) > 10
    assert [r.num_cached_tokens for r in done] == [0] + [3000 // 16 * 16] * 3


def test_prefix_caching_off_costs_the_hit():
    ttfts, done = _prefix_ttfts(enable_prefix_caching=False)
    assert all(r.num_cached_tokens == 0 for r in done)
    assert min(ttfts) == pytest.approx(0.394, rel=0.1)


ARTICLE_CHUNK_GAPS = {512: 0.069, 1024: 0.129, 2048: 0.227, 4096: 0.445, 8192: 0.445}


def test_longest_inter_token_gap_follows_the_chunk_size():
    gaps, ttfts = {}, {}
    for budget in ARTICLE_CHUNK_GAPS:
        sim = _engine(max_num_batched_tokens=budget)
        decoding = (0.0, _prompts(7, 1, 64)[0])
        prompts = [(1.0 + 1.5 * i, p) for i, p in enumerate(_prompts(8, 3, 3500))]
        requests = run_open_loop(sim.core, [decoding, *prompts], max_tokens=400)
        times = requests[0].token_times
        gaps[budget] = max(b - a for a, b in itertools.pairwise(times))
        ttfts[budget] = requests[1].token_times[0] - requests[1].arrival_time
    for budget, article in ARTICLE_CHUNK_GAPS.items():
        assert gaps[budget] == pytest.approx(article, rel=0.15), budget
    assert gaps[512] < gaps[1024] < gaps[2048] < gaps[4096] == gaps[8192]
    # The long prompt's TTFT barely changes with the chunk size (461-494 ms).
    assert max(ttfts.values()) / min(ttfts.values()) < 1.25


def test_eager_mode_hurts_small_models_more():
    def one(model, eager):
        return _closed(1, 4, 512, 128, model=model, enforce_eager=eager).output_throughput

    big = one("Qwen/Qwen3-1.7B", False) / one("Qwen/Qwen3-1.7B", True)
    small = one("Qwen/Qwen3-0.6B", False) / one("Qwen/Qwen3-0.6B", True)
    assert big == pytest.approx(66 / 64, rel=0.03)
    assert small == pytest.approx(168 / 108, rel=0.1)


def test_article_002_hit_and_miss_ttft_on_the_24gb_profile():
    sim = build_engine(
        SimConfig(
            model="Qwen/Qwen3-0.6B",
            max_model_len=4096,
            kv_cache_memory_bytes=GIB,
            gpu_memory_utilization=0.01,
        )
    )
    assert sim.profile.name == "qwen3-0.6b-24gb"
    rng = random.Random(3)
    shared = [rng.randrange(1000, 150000) for _ in range(2032)]
    prompts = [shared + [rng.randrange(1000, 150000) for _ in range(339)] for _ in range(5)]
    done = run_closed_loop(sim.core, prompts, concurrency=1, max_tokens=64)
    ttfts = [r.token_times[0] - r.arrival_time for r in done]
    assert 0.100 <= ttfts[0] <= 0.118
    assert all(t == pytest.approx(0.040, rel=0.15) for t in ttfts[1:])
    assert [r.num_cached_tokens for r in done[1:]] == [2032] * 4


def test_runs_are_deterministic():
    a = run_closed_loop(_engine().core, _prompts(5, 40, 700), concurrency=16, max_tokens=50)
    b = run_closed_loop(_engine().core, _prompts(5, 40, 700), concurrency=16, max_tokens=50)
    assert [r.token_times for r in a] == [r.token_times for r in b]
