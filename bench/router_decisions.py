"""What a kv_aware vllm-router believed at each decision beside what the workers then reported.

vllm-router 0.1.17 at debug level logs one line per kv_aware decision ("KV prefix decision ...
new_prefill_tokens=N credited_prefix_tokens=M"): the prompt tokens its index of the workers'
KV events says the chosen worker holds. The load generator records the tokens each worker
reported cached (`cachedTokens`). Over a run's requests (warm-up included: the router decides
those too) the two sums agree when the router's index follows the caches; a router that
believed hits the worker no longer had (events late or lost) shows more credited than cached.
Run the experiment with the router at debug level
(`bench/real-vllm-experiments/real-vllm-kv-aware-6w-p24-decisions.yaml`), keep the router's log,
then:

    .venv/bin/python bench/router_decisions.py RESULTS_DIR ROUTER_LOG [--arm kv-aware]

The log is the one router process the arm's runs went through, in their order.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

DECISION = re.compile(
    r"KV prefix decision .*?input_tokens=(\d+) new_prefill_tokens=(\d+) "
    r"credited_prefix_tokens=(\d+)"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _kind(cached: int, prefix: int) -> str:
    """A request's hit: its whole shared prefix, part of it, or none."""
    return "full" if cached >= prefix else ("partial" if cached > 0 else "miss")


def _report(run: dict, document: dict, believed: list[int]) -> None:
    """One run's decisions beside its requests, in order (warm-up first, as sent)."""
    cached = [c or 0 for c in document["requests"]["cachedTokens"]]
    prefix = document["config"]["workload"]["sharedPrefix"]["prefixTokens"]
    print(f"{run['id']}: {len(believed)} decisions (warm-up included), digest {run['digest']}")
    for label, tokens in (("the router credited", believed), ("the workers cached", cached)):
        kinds = [_kind(t, prefix) for t in tokens]
        counts = ", ".join(f"{k} {kinds.count(k)}" for k in ("full", "partial", "miss"))
        print(f"  {label:20} {sum(tokens):9,} prompt tokens; requests: {counts}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a kvbench run results directory")
    parser.add_argument("log", type=Path, help="the kv_aware router's log (.gz or plain)")
    parser.add_argument("--arm", default="kv-aware", help="the router's arm (default: kv-aware)")
    args = parser.parse_args()
    opener = gzip.open if args.log.suffix == ".gz" else open
    with opener(args.log, "rt") as f:
        decisions = [int(m.group(3)) for m in DECISION.finditer(ANSI.sub("", f.read()))]
    runs = [json.loads(p.read_text()) for p in (args.results / "runs").glob("r*.json")]
    runs = sorted((r for r in runs if f".{args.arm}." in r["id"]), key=lambda r: r["index"])
    documents = []
    for run in runs:
        with gzip.open(args.results / run["rawResults"]) as f:
            documents.append(json.load(f))
    sizes = [len(d["requests"]["cachedTokens"]) for d in documents]
    if sum(sizes) != len(decisions):
        problem = f"{len(decisions)} decisions in the log, {sum(sizes)} requests in the"
        problem += f" {len(runs)} runs of {args.arm}: the log must be theirs alone"
        print(problem, file=sys.stderr)
        return 2
    at = 0
    for run, document, size in zip(runs, documents, sizes, strict=True):
        _report(run, document, decisions[at : at + size])  # one router serves the arm's runs
        at += size
    return 0


if __name__ == "__main__":
    sys.exit(main())
