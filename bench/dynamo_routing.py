"""Dynamo's KV router against random routing on one seeded shared-prefix sequence.

Starts a fresh loopback deployment (N `dynamo.mocker` workers + frontend) per router mode,
sends the same sequence (the load generator's shared-prefix workload, through its client) to
each, and prints hit rate, mean client-measured TTFT and the per-worker split. Needs Dynamo
(scripts/install-dynamo.sh).

    .venv/bin/python bench/dynamo_routing.py --workers 4 --blocks 320 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kvbench.dynamo import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    RouterOptions,
    ensure_model_dir,
)
from kvbench.dynamo.routing_check import SequenceSpec, run_sequence, summarize_routing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=320, help="KV blocks per worker")
    parser.add_argument("--speedup", type=float, default=1.0, help="mocker --speedup-ratio")
    parser.add_argument("--prefixes", type=int, default=16)
    parser.add_argument("--per-prefix", type=int, default=20)
    parser.add_argument("--prefix-tokens", type=int, default=512)
    parser.add_argument("--suffix-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--modes", default="random,kv")
    parser.add_argument("--repeat", type=int, default=1, help="seeds 0..repeat-1")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "kvbench")
    args = parser.parse_args()

    model = ensure_model_dir(args.cache / "dynamo-models")
    print(
        f"{args.workers} workers x {args.blocks} blocks, {args.prefixes} prefixes x "
        f"{args.per_prefix} requests, prefix {args.prefix_tokens} + suffix "
        f"{args.suffix_tokens} tokens, {args.concurrency} concurrent"
    )
    for seed in range(args.repeat):
        sequence = SequenceSpec(
            seed=seed,
            prefixes=args.prefixes,
            requests_per_prefix=args.per_prefix,
            prefix_tokens=args.prefix_tokens,
            suffix_tokens=args.suffix_tokens,
            max_tokens=args.max_tokens,
            concurrency=args.concurrency,
        )
        for mode in args.modes.split(","):
            spec = DeploymentSpec(
                model_path=model.path,
                workers=args.workers,
                mocker=MockerOptions(num_gpu_blocks=args.blocks, speedup_ratio=args.speedup),
                router=RouterOptions(mode=mode),
            )
            with (
                tempfile.TemporaryDirectory(prefix="kvbench-dynamo-") as scratch,
                DynamoDeployment(spec, Path(scratch)) as deployment,
            ):
                summary = summarize_routing(run_sequence(deployment, sequence))
            split = " ".join(
                f"{w.requests}r/{w.groups}g/{w.cached_tokens / w.prompt_tokens:.2f}"
                for w in summary.workers
            )
            print(
                f"seed {seed} {mode:>11}: hit rate {summary.hit_rate:.3f}  "
                f"mean TTFT {summary.mean_ttft_ms:7.1f} ms  workers (requests/groups/hit) {split}"
            )


if __name__ == "__main__":
    main()
