"""KV cache events over ZMQ in vLLM's wire format, so KV-aware routers can follow the cache.

Wire format (``vllm/distributed/kv_events.py``, msgspec msgpack): a multipart message
``(topic, seq as 8-byte big-endian, payload)`` where payload is the ``array_like``
batch ``[ts, [event, ...], data_parallel_rank]`` and each event is a tagged *map*
(``tag=True``, not ``array_like``, fields left at their defaults omitted):
``{"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
"block_size", "lora_id", "medium", "lora_name", "group_idx"}``,
``{"type": "BlockRemoved", "block_hashes", "medium", "group_idx"}``,
``{"type": "AllBlocksCleared"}``. vllm-router 0.1.17 rejects the older all-array
events ("KV event must be a tagged map"). Hashes are ``ExternalBlockHash``es
(``kvbench.sim.hashing``): 64-bit ints unless ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0``.
One batch is published per engine step that changed the cache; ``ts`` is wall-clock
epoch seconds. An optional ROUTER replay endpoint answers ``start_seq`` (8-byte
big-endian) with the buffered batches and an end marker ``-1``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from itertools import count

import msgspec
import zmq

from kvbench.sim.block_pool import KVEvent
from kvbench.sim.config import KVEventsConfig
from kvbench.sim.hashing import ExternalBlockHash, maybe_convert_block_hash, use_int_block_hashes

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "KVEventBatch", "ZmqEventPublisher"]

logger = logging.getLogger("kvbench.sim.kv_events")

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged event union."""


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    group_idx: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


def to_wire(events: list[KVEvent], block_size: int, *, int_hashes: bool) -> list[KVCacheEvent]:
    """Convert the block pool's event tuples into vLLM's structs (one cache group, 0)."""
    out: list[KVCacheEvent] = []
    for event in events:
        kind = event[0]
        if kind == "stored":
            parent = event[2]
            out.append(
                BlockStored(
                    block_hashes=[maybe_convert_block_hash(h, int_hashes) for h in event[1]],
                    parent_block_hash=(
                        None if parent is None else maybe_convert_block_hash(parent, int_hashes)
                    ),
                    token_ids=list(event[3]),
                    block_size=block_size,
                    lora_id=None,
                    medium=MEDIUM_GPU,
                    lora_name=None,
                    group_idx=0,
                )
            )
        elif kind == "removed":
            hashes = [maybe_convert_block_hash(h, int_hashes) for h in event[1]]
            out.append(BlockRemoved(block_hashes=hashes, medium=MEDIUM_GPU, group_idx=0))
        else:
            out.append(AllBlocksCleared())
    return out


class ZmqEventPublisher:
    """PUB socket (plus optional ROUTER replay) publishing one batch per call."""

    def __init__(self, config: KVEventsConfig, *, block_size: int) -> None:
        self.block_size = block_size
        self.int_hashes = use_int_block_hashes()
        self._ctx = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        endpoint = config.endpoint
        if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
            self._pub.bind(endpoint)
        else:
            self._pub.connect(endpoint)
        self._topic = config.topic.encode()
        self._seq = count()
        self._encode = msgspec.msgpack.Encoder().encode
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._lock = threading.Lock()
        self._running = True
        self._replay_thread: threading.Thread | None = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.bind(config.replay_endpoint)
            self._replay_thread = threading.Thread(
                target=self._serve_replay, name="kvbench-sim-kv-replay", daemon=True
            )
            self._replay_thread.start()

    @property
    def last_endpoint(self) -> str:
        """The bound address (useful with ``tcp://127.0.0.1:*``)."""
        return self._pub.getsockopt_string(zmq.LAST_ENDPOINT)

    def publish(self, events: list[KVEvent]) -> None:
        """Send one batch; never blocks (PUB drops at the high-water mark)."""
        batch = KVEventBatch(
            ts=time.time(),
            events=to_wire(events, self.block_size, int_hashes=self.int_hashes),
            data_parallel_rank=0,
        )
        payload = self._encode(batch)
        seq = next(self._seq)
        try:
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            logger.warning("dropping KV event batch %d: %s", seq, exc)
        with self._lock:
            self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        poller = zmq.Poller()
        poller.register(self._replay, zmq.POLLIN)
        while self._running:
            if not poller.poll(100):
                continue
            frames = self._replay.recv_multipart()
            if len(frames) != 3:
                logger.warning("invalid replay request: %d frames", len(frames))
                continue
            client, _, start = frames
            start_seq = int.from_bytes(start, "big")
            with self._lock:
                buffered = [item for item in self._buffer if item[0] >= start_seq]
            for seq, payload in buffered:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            self._replay.send_multipart((client, b"", END_SEQ, b""))

    def close(self) -> None:
        self._running = False
        if self._replay_thread is not None:
            self._replay_thread.join(timeout=1.0)
            self._replay.close(linger=0)
        self._pub.close(linger=0)
