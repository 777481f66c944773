"""`EngineCore.decode_steps` leaves the engine exactly as as many `step()` calls would, after
every call: the same clock, token times, blocks held, blocks cached and free queue, so a
decode run never holds a token without its block or fills a block without caching it."""

import math

from kvbench.sim.config import SimConfig
from kvbench.sim.engine import EngineCore
from kvbench.sim.factory import build_engine
from kvbench.sim.request import SimRequest


def _engine() -> EngineCore:
    config = SimConfig(
        model="Qwen/Qwen3-0.6B", max_model_len=2048, kv_cache_memory_bytes=260_000_000,
        gpu_memory_utilization=0.01,
    )  # fmt: skip
    core = build_engine(config).core
    core.stats.observe_latencies = False  # as virtual time's workers: decode runs stretch
    for i in range(6):
        prompt = list(range(100, 600)) + list(range(10_000 * (i + 1), 10_000 * (i + 1) + 37 * i))
        core.add_request(SimRequest(f"r{i}", prompt, 90 + 13 * i, arrival_time=0.002 * i))
    return core


def _state(core: EngineCore) -> tuple:
    running = sorted(core.scheduler.running, key=lambda r: r.request_id)
    return (
        core.clock,
        core.num_steps,
        [(r.request_id, list(r.blocks), r.num_cached_blocks, list(r.token_times)) for r in running],
        list(core.kv.pool.free_queue),
        core.stats.generation_tokens,
    )


def test_decode_runs_leave_the_engine_as_single_steps_do() -> None:
    """Catches a decode run that goes past a block boundary (a token with no block, a full
    block not cached), mis-adds a step time, or miscounts tokens."""
    single, runs = _engine(), _engine()
    calls = 0
    while runs.has_work:
        before = runs.num_steps
        if runs.scheduler.running:
            runs.decode_steps(math.inf)
        if runs.num_steps == before:
            assert runs.step() is not None
        calls += 1
        while single.num_steps < runs.num_steps:
            single.step()
        assert _state(single) == _state(runs), f"after call {calls}, step {runs.num_steps}"
    assert calls < runs.num_steps / 3  # the runs were runs, not single steps
