"""KV events over ZMQ in vLLM's msgpack layout (array batch, tagged-map events), as
vllm-router 0.1.17 decodes it, with the block hashes vLLM computes."""

import time

import msgspec
import pytest
import zmq
from sim_http_harness import running_sim

from kvbench.sim.hashing import hash_block_tokens, init_none_hash, sha256, sha256_cbor

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


def _stored(events: list) -> list[dict]:
    return [e for e in events if e["type"] == "BlockStored"]


def _chain(hash_fn, tokens: list[int], block_size: int = 16) -> list[bytes]:
    """vLLM's block hashes of the full blocks of `tokens` (kv_cache_utils.hash_block_tokens)."""
    parent, out = init_none_hash(hash_fn), []
    for i in range(len(tokens) // block_size):
        parent = hash_block_tokens(hash_fn, parent, tokens[i * block_size : (i + 1) * block_size])
        out.append(parent)
    return out


def test_stored_events_chain_blocks_and_reset_clears(sim_with_events):
    sim, sub = sim_with_events
    prompt = list(range(2000, 2040))  # 2 full blocks of 16, plus 8 tokens
    sim.post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
    first = _stored(_drain(sub, lambda ev: bool(_stored(ev))))[0]
    assert set(first) == {
        "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
        "medium", "lora_name", "group_idx",
    }  # fmt: skip
    assert (first["block_size"], first["lora_id"], first["medium"], first["lora_name"]) == (
        16, None, "GPU", None,
    )  # fmt: skip
    assert first["group_idx"] == 0 and first["parent_block_hash"] is None
    assert first["token_ids"] == prompt[:32]
    expected = [int.from_bytes(h, "big") & (2**64 - 1) for h in _chain(sha256, prompt)]
    assert first["block_hashes"] == expected

    # The same prefix plus one more block: the new event chains to the cached blocks.
    longer = [*prompt, *range(3000, 3010)]
    sim.post("/v1/completions", {"prompt": longer, "max_tokens": 1})
    chained = _stored(_drain(sub, lambda ev: any(e["parent_block_hash"] for e in _stored(ev))))
    event = next(e for e in chained if e["parent_block_hash"] is not None)
    assert event["parent_block_hash"] == expected[-1] and event["token_ids"] == longer[32:48]

    assert sim.post("/reset_prefix_cache", {}).status_code == 200
    events = _drain(sub, lambda ev: {"type": "AllBlocksCleared"} in ev)
    assert {"type": "AllBlocksCleared"} in events


def test_digest_hashes_with_sha256_cbor_and_pythonhashseed(monkeypatch):
    """VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends the 32-byte digests; PYTHONHASHSEED
    seeds NONE_HASH, so a consumer can recompute them from the token ids."""
    monkeypatch.setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "0")
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    config = '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*"}'
    with running_sim(kv_events_config=config, prefix_caching_hash_algo="sha256_cbor") as sim:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(sim.kv_endpoint)
        try:
            _wait_for_subscription(sim, sub)
            prompt = list(range(7000, 7048))
            sim.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
            stored = _stored(
                _drain(sub, lambda ev: any(e["token_ids"] == prompt for e in _stored(ev)))
            )
        finally:
            sub.close(linger=0)
    parent = init_none_hash(sha256_cbor, {"PYTHONHASHSEED": "0"})
    event = next(e for e in stored if e["token_ids"] == prompt)
    assert event["block_hashes"] == _chain(sha256_cbor, prompt)
    assert event["block_hashes"][0] == hash_block_tokens(sha256_cbor, parent, prompt[:16])


def test_evictions_publish_block_removed(sim_with_events):
    sim, sub = sim_with_events
    first = list(range(5000, 5032))
    sim.post("/v1/completions", {"prompt": first, "max_tokens": 1})
    first_hashes = _stored(_drain(sub, lambda ev: bool(_stored(ev))))[0]["block_hashes"]
    # 584 usable blocks: a run of long prompts recycles every free block.
    for i in range(4):
        sim.post("/v1/completions", {"prompt": list(range(10000 * (i + 1), 10000 * (i + 1) + 3000)),
                                     "max_tokens": 1})  # fmt: skip
    events = _drain(
        sub,
        lambda ev: (
            {h for e in ev if e["type"] == "BlockRemoved" for h in e["block_hashes"]}
            >= set(first_hashes)
        ),
    )
    removed = [e for e in events if e["type"] == "BlockRemoved"]
    assert all(e["medium"] == "GPU" and e["group_idx"] == 0 for e in removed)
    assert all(len(e["block_hashes"]) == 1 for e in removed)
