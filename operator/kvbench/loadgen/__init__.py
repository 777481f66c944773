"""`kvbench loadgen`: the load generator a run's Job executes, and the source of every figure.

Seeded workloads, a client that opens a new TCP connection per request by default, per-pod
server counters read around the measured window, and a versioned result document.
"""

from kvbench.loadgen.config import RunConfig, load_config
from kvbench.loadgen.results import LoadgenResult
from kvbench.loadgen.runner import run_load, run_sync

__all__ = ["LoadgenResult", "RunConfig", "load_config", "run_load", "run_sync"]
