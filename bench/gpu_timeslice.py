"""How a GPU time-slices between processes: the latency of a short kernel in one process while
another keeps the GPU busy with long ones (no MPS), on a GPU machine with torch.

Process B launches a small matmul and waits for it, over and over; alone it takes microseconds.
While process A runs back-to-back large matmuls (each tens of milliseconds), B's kernel waits
for the GPU to switch contexts: the distribution of B's latencies shows the time slice (how
long A holds the GPU before B runs) and whether A's long kernels are preempted at all. A second
pass gives B kernels of about 1 ms (a decode step's size) to see how the slice shares a GPU
between a long job and short bursts: A's throughput with and without B.

    python bench/gpu_timeslice.py OUT.json
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import sys
import time


def _hog(seconds: float, size: int, ready, result) -> None:
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    (a @ b).sum().item()
    torch.cuda.synchronize()
    t = time.perf_counter()
    (a @ b).sum().item()
    one = time.perf_counter() - t
    ready.set()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        c = a @ b
        n += 1
        if n % 4 == 0:
            c.sum().item()
    torch.cuda.synchronize()
    result.put({"kernel_s": one, "kernels_per_s": n / (time.perf_counter() - start)})


def _probe(seconds: float, size: int) -> list[float]:
    import torch

    x = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    out = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        y = x @ x
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
        del y
        time.sleep(0.0005)
    return out[5:]


def _summary(lat: list[float]) -> dict[str, float]:
    lat = sorted(lat)
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]  # noqa: E731
    return {"n": len(lat), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99),
            "max": lat[-1], "mean": statistics.fmean(lat)}  # fmt: skip


def main() -> int:
    ctx = mp.get_context("spawn")
    out: dict = {}
    for probe_size in (256, 8192):
        alone = _probe(2.0, probe_size)
        for hog_size in (16384,):
            ready, result = ctx.Event(), ctx.Queue()
            hog = ctx.Process(target=_hog, args=(4.0, hog_size, ready, result))
            hog.start()
            ready.wait(120)
            time.sleep(0.3)
            shared = _probe(3.0, probe_size)
            hog.join()
            stats = result.get()
            ready2, result2 = ctx.Event(), ctx.Queue()
            solo = ctx.Process(target=_hog, args=(2.0, hog_size, ready2, result2))
            solo.start()
            solo.join()
            key = f"probe{probe_size}-hog{hog_size}"
            out[key] = {
                "probe_alone": _summary(alone),
                "probe_shared": _summary(shared),
                "hog_kernel_s": stats["kernel_s"],
                "hog_rate_shared": stats["kernels_per_s"],
                "hog_rate_alone": result2.get()["kernels_per_s"],
            }
            print(key, json.dumps(out[key]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
