"""A kv_aware vllm-router and the workers' KV events: the flags that subscribe it, and what it
received, the same on every back end.

The router connects to each worker's ZMQ publisher (`--kv-event-source URL=ENDPOINT`) and keys
the blocks by the workers' block size and model: the pinned 0.1.17 exits at start-up without
`--kv-event-block-size` and `--kv-event-model` ("static KV event sources require worker URLs
and model identity"), so both back ends build the flags here.

vllm-router 0.1.17 exports no count of the events it received (`/metrics` has none); its
subscriber logs one line per batch it decoded and applied, at debug level and naming the
worker (`kv_index live sequence advanced source=http://10.0.0.7:8000 rank=0 seq=41`; a batch it
cannot decode is a warning that names no worker). A kv_aware router runs with that one target
at debug (`RUST_LOG`, `router_log_filter`), and the back ends count those lines after the
window (`kv_event_batches`): a worker that served requests and was never heard from means
the router routed on load alone (`silent_publishers`).
"""

import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kvbench.loadgen.results import LoadgenResult
from kvbench.runner.cluster.base import WorkerInfo

__all__ = ["KvEventFeed", "kv_event_batches", "router_log_filter", "silent_publishers"]

SUBSCRIBER_TARGET = "vllm_router_rs::kv_index::subscriber"
"""The router's log target that writes one line per KV event batch it applied."""
_BATCH = re.compile(r"kv_index live sequence advanced source=(\S+)")
_START = "Starting router on"
"""The router's first line of every start (at info)."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class KvEventFeed(BaseModel):
    """Where a kv_aware router subscribes, and the cache identity the workers publish under."""

    endpoints: dict[str, str] = Field(
        ..., description="Worker base URL -> the ZMQ endpoint the router connects to"
    )
    block_size: int = Field(..., ge=1, description="The workers' tokens per KV block")
    model: str = Field(..., description="The workers' served model name")

    def router_args(self) -> list[str]:
        """vllm-router's flags for this feed, one `--kv-event-source` per worker."""
        args = []
        for url, endpoint in self.endpoints.items():
            args += ["--kv-event-source", f"{url}={endpoint}"]
        return [
            *args,
            "--kv-event-block-size",
            str(self.block_size),
            "--kv-event-model",
            self.model,
        ]


def router_log_filter(extra_args: Sequence[str]) -> str:
    """`RUST_LOG` for a kv_aware router: the level its `--log-level` asks (info by default),
    and the subscriber's batch lines. RUST_LOG replaces the filter `--log-level` would make,
    hence both."""
    level = "info"
    for i, arg in enumerate(extra_args):
        if arg == "--log-level" and i + 1 < len(extra_args):
            level = extra_args[i + 1]
        elif arg.startswith("--log-level="):
            level = arg.split("=", 1)[1]
    subscriber = "trace" if level == "trace" else "debug"
    return f"vllm_router_rs={level},{SUBSCRIBER_TARGET}={subscriber}"


def kv_event_batches(log: str, workers: list[WorkerInfo]) -> dict[str, int]:
    """KV event batches the router applied from each worker (by name) since its last start in
    `log`; a worker it heard nothing from counts 0."""
    text = _ANSI.sub("", log)
    start = text.rfind(_START)
    counts = dict.fromkeys((w.name for w in workers), 0)
    names = {w.base_url: w.name for w in workers}
    for url in _BATCH.findall(text[max(start, 0) :]):
        if url in names:
            counts[names[url]] += 1
    return counts


def silent_publishers(received: dict[str, int], result: LoadgenResult) -> list[str]:
    """Workers the router received no KV event from although they served requests in the
    window. A worker the router never chose stored nothing to tell, so it is not one; a worker
    the result has no counters of is taken to have served."""
    served = {pod.pod: pod.requests for pod in result.counters.pods or []}
    return [name for name, n in received.items() if n == 0 and served.get(name, 1) > 0]
