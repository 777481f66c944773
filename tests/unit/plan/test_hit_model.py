"""The hit-rate model against the simulator's own prefix cache, block for block.

The Monte Carlo drives `kvbench.sim.kv_cache.KVCacheManager` (vLLM's block pool, free queue
and tail-first freeing) with article 002's requests one at a time: a lookup, the blocks of the
prompt and the output cached, then freed. Che's approximation must land within 3 points of it
on uniform and Zipf popularity, where the article's min(1, held / P) misses skew entirely.
"""

import random

import pytest

from kvbench.loadgen.routing import bounded_assignment
from kvbench.plan.hit_model import RequestBlocks, affinity_hit_rate, che_hit_rate
from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import SimRequest

PREFIX, SUFFIX, OUTPUT, BLOCK = 2032, 339, 64, 16
KV_TOKENS = 9360  # one worker of article 002: 1 GiB of Qwen3-0.6B KV
BLOCKS = RequestBlocks.of(PREFIX, PREFIX + SUFFIX, OUTPUT, BLOCK)


def _zipf(prefixes: int, s: float) -> list[float]:
    return [1.0 / (k + 1) ** s for k in range(prefixes)]


def _monte_carlo(weights: list[float], requests: int, seed: int) -> float:
    """Share of requests (after the first fifth, the warm-up) with a cached first block."""
    rng = random.Random(seed)
    cache = KVCacheManager(KV_TOKENS // BLOCK, block_size=BLOCK, max_model_len=4096)
    heads = [[rng.randrange(1000, 30000) for _ in range(PREFIX)] for _ in weights]
    hits = counted = 0
    for n, prefix in enumerate(rng.choices(range(len(weights)), weights=weights, k=requests)):
        ids = heads[prefix] + [rng.randrange(1000, 30000) for _ in range(SUFFIX)]
        request = SimRequest(f"r{n}", ids, OUTPUT, arrival_time=0.0, salt=n)
        blocks, tokens = cache.get_computed_blocks(request)
        request.num_output_tokens = OUTPUT  # every token but the last is computed and cached
        assert cache.allocate_slots(request, len(ids) + OUTPUT - 1 - tokens, tokens, blocks)
        cache.free(request)
        if n >= requests // 5:
            counted += 1
            hits += tokens > 0
    return hits / counted


@pytest.mark.parametrize("s", [0.0, 0.6, 1.0, 1.4])
@pytest.mark.parametrize("prefixes", [12, 24])
def test_che_follows_the_simulators_cache(prefixes: int, s: float) -> None:
    weights = _zipf(prefixes, s)
    simulated = _monte_carlo(weights, 3000, seed=prefixes)
    model = che_hit_rate(weights, BLOCKS, KV_TOKENS // BLOCK - 1)
    print(f"P {prefixes}, s {s}: simulated {simulated:.3f}, Che {model:.3f}")
    assert model == pytest.approx(simulated, abs=0.03)


def test_uniform_is_the_articles_capacity_model() -> None:
    held = KV_TOKENS / (PREFIX + SUFFIX)
    for prefixes in (7, 12, 24):
        rate = che_hit_rate([1.0] * prefixes, BLOCKS, KV_TOKENS // BLOCK - 1)
        assert rate == pytest.approx(held / prefixes, abs=0.01)


def test_skew_raises_the_hit_rate_and_affinity_raises_it_further() -> None:
    cache = KV_TOKENS // BLOCK - 1
    rates = [che_hit_rate(_zipf(24, s), BLOCKS, cache) for s in (0.0, 0.6, 1.0, 1.4)]
    assert rates == sorted(rates) and rates[-1] > rates[0] + 0.3
    owners = bounded_assignment(24, [f"w{i}" for i in range(6)])
    assert affinity_hit_rate(_zipf(24, 1.0), owners, BLOCKS, cache) > rates[2] + 0.3


def test_what_fits_always_hits_and_nothing_never_does() -> None:
    no_unique = RequestBlocks(prefix=10, unique=0)
    assert che_hit_rate([1.0] * 5, no_unique, 51) == 1.0  # four others fit beside any one
    assert che_hit_rate([1.0] * 5, no_unique, 30) < 1.0
    assert che_hit_rate([1.0, 0.0], BLOCKS, 0) == 0.0


def test_affinity_weighs_each_workers_stream_by_its_load() -> None:
    """Two workers: one holds the only popular prefix (always a hit), the other two rare ones
    that evict each other."""
    blocks = RequestBlocks(prefix=100, unique=10)
    owners = {0: "a", 1: "b", 2: "b"}
    weights = [8.0, 1.0, 1.0]
    alone = che_hit_rate([1.0], blocks, 120)
    pair = che_hit_rate([1.0, 1.0], blocks, 120)
    assert affinity_hit_rate(weights, owners, blocks, 120) == pytest.approx(
        0.8 * alone + 0.2 * pair
    )
    assert alone > 0.99 and pair < 0.9
