"""KV events over ZMQ in vLLM's array-like msgpack layout, as vllm-router decodes it."""

import time

import msgspec
import pytest
import zmq
from sim_http_harness import running_sim

_decode = msgspec.msgpack.Decoder().decode


def _drain(sub: zmq.Socket, until, timeout: float = 5.0) -> list:
    """Receive batches until ``until(events)`` holds; returns all events seen."""
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sub.poll(100):
            _topic, seq, payload = sub.recv_multipart()
            batch = _decode(payload)
            assert isinstance(batch[0], float) and batch[2] == 0
            assert len(seq) == 8
            events.extend(batch[1])
            if until(events):
                return events
    pytest.fail(f"events not seen in time: {events!r}")


def _wait_for_subscription(sim, sub: zmq.Socket) -> None:
    """PUB drops messages until the SUB has joined: probe until one arrives, then drain."""
    deadline = time.monotonic() + 10
    probe = 0
    while time.monotonic() < deadline:
        probe += 1
        start = 140_000 + 20 * probe
        body = {"prompt": list(range(start, start + 20)), "max_tokens": 1}
        assert sim.post("/v1/completions", body).status_code == 200
        if sub.poll(200):
            while sub.poll(200):
                sub.recv_multipart()
            return
    pytest.fail("KV event subscription never received anything")


@pytest.fixture
def sim_with_events():
    config = '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "topic": "kv"}'
    with running_sim(dev_mode=True, kv_events_config=config) as sim:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.connect(sim.kv_endpoint)
        _wait_for_subscription(sim, sub)
        yield sim, sub
        sub.close(linger=0)


def test_stored_events_chain_blocks_and_reset_clears(sim_with_events):
    sim, sub = sim_with_events
    prompt = list(range(2000, 2040))  # 2 full blocks of 16, plus 8 tokens
    sim.post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
    events = _drain(sub, lambda ev: any(e[0] == "BlockStored" for e in ev))
    stored = [e for e in events if e[0] == "BlockStored"]
    _tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name = stored[0]
    assert len(stored[0]) >= 8  # vllm-router reads at least 8 fields
    assert (block_size, lora_id, medium, lora_name) == (16, None, "GPU", None)
    assert parent is None and len(hashes) == 2 and tokens == prompt[:32]
    assert all(isinstance(h, int) and 0 <= h < 2**64 for h in hashes)

    # The same prefix plus one more block: the new event chains to the cached blocks.
    longer = [*prompt, *range(3000, 3010)]
    sim.post("/v1/completions", {"prompt": longer, "max_tokens": 1})
    events = _drain(sub, lambda ev: any(e[0] == "BlockStored" and e[2] is not None for e in ev))
    chained = next(e for e in events if e[0] == "BlockStored" and e[2] is not None)
    assert chained[2] == hashes[-1] and chained[3] == longer[32:48]

    assert sim.post("/reset_prefix_cache", {}).status_code == 200
    events = _drain(sub, lambda ev: ["AllBlocksCleared"] in ev)
    assert ["AllBlocksCleared"] in events


def test_evictions_publish_block_removed(sim_with_events):
    sim, sub = sim_with_events
    first = list(range(5000, 5032))
    sim.post("/v1/completions", {"prompt": first, "max_tokens": 1})
    stored = _drain(sub, lambda ev: any(e[0] == "BlockStored" for e in ev))
    first_hashes = next(e for e in stored if e[0] == "BlockStored")[1]
    # 584 usable blocks: a run of long prompts recycles every free block.
    for i in range(4):
        sim.post("/v1/completions", {"prompt": list(range(10000 * (i + 1), 10000 * (i + 1) + 3000)),
                                     "max_tokens": 1})  # fmt: skip
    events = _drain(
        sub,
        lambda ev: {h for e in ev if e[0] == "BlockRemoved" for h in e[1]} >= set(first_hashes),
    )
    removed = [e for e in events if e[0] == "BlockRemoved"]
    assert all(e[2] == "GPU" and len(e[1]) == 1 for e in removed)
