"""`kvbench loadgen`: the load generator a run's Job executes, and the source of every figure.

Seeded workloads, a client that opens a new TCP connection per request by default, per-pod
server counters read around the measured window, and a versioned result document.
"""

__all__: list[str] = []
