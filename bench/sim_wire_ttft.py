"""How late the first token leaves ``kvbench sim`` against the TTFT it reports (issue 14, item 7).

One ``kvbench sim --time-scale 1`` process on 127.0.0.1, ``--concurrency`` streamed text
completions of ``--prompt-tokens`` stand-in tokens at a time, ``/metrics`` scraped 3 times a
second. Prints the wire-minus-reported TTFT (ms) at p50/p90/p99/max, and the histogram's
mean TTFT against the responses'. The client runs in this process (tests/integration/sim/
wire_ttft.py), so on two cores both sides share the machine.

    .venv/bin/python bench/sim_wire_ttft.py [--requests 200] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "sim"))

from wire_ttft import GOAL_MS, client_itl, measure, sim_process, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=1800)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--scrapes-per-second", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sim_process(Path(tmp) / "sim.log") as (host, port):
        run = measure(
            host, port, requests=args.requests, concurrency=args.concurrency,
            prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
            scrape_interval=1 / args.scrapes_per_second,
        )  # fmt: skip
    figures = summary(run)
    reported = [s.reported for s in run.samples]
    print(
        f"{len(run.samples)} requests, concurrency {args.concurrency}, "
        f"{args.prompt_tokens}-token text prompts, {run.scrapes} scrapes of /metrics"
    )
    print("wire - reported TTFT (ms): " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    wire_itl, reported_itl = client_itl(run)
    print(f"client ITL (ms): wire {wire_itl:.3f}, reported {reported_itl:.3f}")
    for key, goal in GOAL_MS.items():
        met = abs(figures[key]) <= goal
        print(f"goal {key} <= {goal:g} ms: {'met' if met else 'NOT met'} ({figures[key]:.2f} ms)")
    print(
        f"mean reported TTFT {sum(reported) / len(reported) * 1e3:.2f} ms; histogram "
        f"{run.histogram_sum / max(run.histogram_count, 1) * 1e3:.2f} ms "
        f"over {run.histogram_count} requests"
    )


if __name__ == "__main__":
    main()
