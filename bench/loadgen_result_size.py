"""How big a load generator's result document is, for runs of 1,200 and 10,000 requests.

A run's result travels back from its Job through a Kubernetes object, which holds about
1 MiB. This runs the real `kvbench loadgen` path (`run_load`) against one `kvbench sim` at
time scale 0 (it never waits, so the run takes seconds) with the article's shared-prefix
prompts (2,032 + 339 = 2,371 tokens) and metrics, and reports, per request count and output
length: the encoded document (gzip of compact JSON, `LoadgenResult.encode`), the compact
JSON, and the same document in the schema-1 form (one row per request, indented JSON).

    .venv/bin/python bench/loadgen_result_size.py [--requests 1200,10000] [--output 10,100]
"""

import argparse
import json
import re
import subprocess
import sys
import time
from typing import Any

import uvloop

from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.measure import run_load
from kvbench.loadgen.results import LoadgenResult

_LISTEN = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class Sim:
    """`kvbench sim --time-scale 0` on an ephemeral port, with room for 16 requests' KV."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvbench.sim", "--host", "127.0.0.1", "--port", "0",
             "--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096", "--time-scale", "0",
             "--kv-cache-memory-bytes", "4294967296", "--enable-prompt-tokens-details",
             "--worker-id", "sim-0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if match := _LISTEN.search(line):
                self.url = f"http://127.0.0.1:{int(match.group(1))}"
                return
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise SystemExit("the simulator did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def config(url: str, requests: int, output_tokens: int) -> RunConfig:
    """40 prefixes, 32 in flight: some prefixes are cached when they come back, some not."""
    return RunConfig.model_validate(
        {
            "runId": f"size-{requests}-{output_tokens}",
            "model": "Qwen/Qwen3-0.6B",
            "target": {"kind": "url", "url": url},
            "workload": {
                "sharedPrefix": {
                    "prefixes": [40],
                    "outputTokens": output_tokens,
                    "requestsPerPrefix": 1,
                    "minRequests": requests,
                }
            },
            "point": {"concurrency": 32, "prefixes": 40},
            "seed": 1,
            "timeScale": 0,
            "metrics": {"kind": "direct", "pods": {"sim-0": f"{url}/metrics"}},
        }
    )


def schema_1_size(result: LoadgenResult) -> int:
    """The same document as schema 1 wrote it: a row per request, JSON indented by one."""
    document: dict[str, Any] = json.loads(result.to_json())
    document["requests"] = [
        r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in result.records()
    ]
    return len(json.dumps(document, indent=1).encode())


def measure(url: str, requests: int, output_tokens: int) -> dict[str, Any]:
    result = uvloop.run(run_load(config(url, requests, output_tokens)))
    records = result.records()
    return {
        "measured": result.summary.requests,
        "records": len(records),
        "output_tokens": output_tokens,
        "errors": result.summary.errors,
        "request_hit_rate": round(result.summary.hit_rates.request_hit_rate or 0, 3),
        "encoded_kib": round(len(result.encode()) / 1024, 1),
        "compact_json_kib": round(len(result.to_json().encode()) / 1024, 1),
        "schema_1_kib": round(schema_1_size(result) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", default="1200,10000", help="Measured requests per run")
    parser.add_argument("--output", default="10,100", help="Output tokens per request")
    args = parser.parse_args()
    sim = Sim()
    try:
        rows = [
            measure(sim.url, int(n), int(tokens))
            for n in args.requests.split(",")
            for tokens in args.output.split(",")
        ]
    finally:
        sim.stop()
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
