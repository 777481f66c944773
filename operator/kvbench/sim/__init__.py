"""``kvbench sim``: a vLLM-compatible simulator that answers like vLLM and decides like vLLM.

The engine (``engine``, ``scheduler``, ``kv_cache``, ``block_pool``, ``timing``) runs on a
virtual clock and knows nothing about HTTP; the server (``server``, ``api_models``,
``clock``, ``metrics``, ``kv_events``) exposes it with vLLM's OpenAI-compatible API.
"""

from kvbench.sim.config import KVEventsConfig, SimConfig
from kvbench.sim.factory import SimEngine, build_engine

__all__ = ["KVEventsConfig", "SimConfig", "SimEngine", "build_engine"]
