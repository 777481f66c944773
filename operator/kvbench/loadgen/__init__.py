"""`kvbench loadgen`: the load generator a run's Job executes, and the source of every figure.

Seeded workloads, a client that opens a new TCP connection per request by default, per-pod
server counters read around the measured window, and a versioned result document.
"""

from kvbench.loadgen.config import RunConfig, load_config
from kvbench.loadgen.measure import run_load, run_sync
from kvbench.loadgen.results import LoadgenResult, read_result

__all__ = ["LoadgenResult", "RunConfig", "load_config", "read_result", "run_load", "run_sync"]
