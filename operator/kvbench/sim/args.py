"""Command-line arguments of the simulator: ``vllm serve``'s flags plus a few of its own.

Both ``--model M ...`` and ``serve M ...`` forms work, so the same pod arguments serve
vLLM and the simulator. vLLM flags the simulator does not model are accepted and
returned as "ignored" for a warning. Simulator-only flags: ``--profile``,
``--gpu-memory-bytes``, ``--time-scale``, ``--worker-id``, ``--kv-capacity-jitter``,
``--load-seconds``, ``--prefix-cache-stats-at``, and the HTTP limits
``--max-request-body-bytes``, ``--http-timeout-keep-alive``, ``--request-body-timeout``.
"""

from __future__ import annotations

import argparse
import os
import re
import textwrap

from pydantic import ValidationError

from kvbench.sim.config import SimConfig
from kvbench.sim.timing import GPUS, PROFILES

__all__ = ["build_parser", "human_int", "parse_sim_args"]

_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def human_int(value: str) -> int:
    """vLLM's human-readable ints: ``4096``, ``32k`` (x1000), ``1G`` (x2**30)."""
    match = _HUMAN.match(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}")
        return int(number)
    factor = _DECIMAL.get(suffix) or _BINARY[suffix]
    return int(float(number) * factor)


def _profiles_epilog() -> str:
    """The --profile names --help lists: the calibrated ones, then a roofline per GPU."""
    lines = ["timing profiles (--profile):"]
    lines += [f"  {name}: {profile.source}" for name, profile in PROFILES.items()]
    rooflines = ", ".join(f"roofline:{gpu}" for gpu in GPUS)
    lines += textwrap.wrap(
        f"{rooflines}: from the GPU's datasheet", initial_indent="  ", subsequent_indent="    "
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvbench sim",
        description="vLLM-compatible simulator (accepts `vllm serve` flags). Also `kvbench sim "
        "serve MODEL [flags]`. vLLM flags it does not model are accepted and named in a "
        "warning. Contract: docs/simulator.md.",
        epilog=_profiles_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    bool_flag = argparse.BooleanOptionalAction
    p.add_argument("--host", help="address to listen on (default: every address, 0.0.0.0)")
    p.add_argument(
        "--port", type=int, default=8000, help="port to listen on, 0 for any (default: 8000)"
    )
    p.add_argument(
        "--model",
        default="Qwen/Qwen3-0.6B",
        help="model name (its geometry from the simulator's table) or a directory holding its "
        "config.json (default: Qwen/Qwen3-0.6B)",
    )
    p.add_argument(
        "--served-model-name",
        nargs="+",
        help="the name(s) requests must use for the model (default: --model)",
    )
    p.add_argument(
        "--max-model-len",
        type=human_int,
        help="longest prompt + output in tokens, e.g. 4096 or 4k (default: the model's "
        "max_position_embeddings)",
    )
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=human_int,
        help="KV cache size, e.g. 1G; overrides --gpu-memory-utilization for the KV cache",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of the GPU's memory the engine may use; the KV cache gets what the "
        "weights and activations leave of it (default: 0.9)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float16", "float32", "half", "float"],
        help="the weights' dtype; an auto KV cache is stored in it",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"],
        help="dtype of the KV cache (fp8 halves its bytes per token); auto: the weights' dtype",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=16,
        choices=[1, 8, 16, 32, 64, 128],
        help="tokens per KV cache block, the unit of prefix caching (default: 16)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=human_int,
        help="most requests in one batch (default: vLLM's, 256, or 1024 on a GPU of 70 GiB "
        "or more)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=human_int,
        help="token budget of one engine step, the prefill chunk size (default: vLLM's, 2048, "
        "or 8192 on a GPU of 70 GiB or more)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=bool_flag,
        default=True,
        help="reuse the KV blocks of a prompt's cached prefix (default: on)",
    )
    p.add_argument(
        "--prefix-caching-hash-algo",
        default="sha256",
        choices=["sha256", "sha256_cbor"],
        help="hash of a KV block's tokens, as it appears in KV events (default: sha256)",
    )
    p.add_argument(
        "--enable-prompt-tokens-details",
        action=bool_flag,
        default=False,
        help="report usage.prompt_tokens_details.cached_tokens in responses (default: off)",
    )
    p.add_argument(
        "--enforce-eager",
        action=bool_flag,
        default=False,
        help="time steps as vLLM without CUDA graphs: a kernel launch cost per layer "
        "(default: off)",
    )
    p.add_argument(
        "--max-cudagraph-capture-size",
        type=human_int,
        help="the largest step, in tokens, a CUDA graph covers; larger steps pay the host's "
        "launch time (default: vLLM's, min(2 x max-num-seqs, 512, max-num-batched-tokens))",
    )
    p.add_argument(
        "--scheduler-reserve-full-isl",
        action=bool_flag,
        default=True,
        help="admit a waiting request only when its whole prompt fits (vLLM's default)",
    )
    p.add_argument(
        "--async-scheduling",
        action=bool_flag,
        default=True,
        help="decide the next batch while the current one runs, as vLLM does by default: an "
        "arrival at a busy engine waits one more step, finished requests free their blocks "
        "after the next decision",
    )
    p.add_argument(
        "--kv-events-config",
        help="JSON, as vLLM's --kv-events-config: publish KV cache events over ZMQ",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the generated tokens and of --kv-capacity-jitter (default: 0)",
    )
    p.add_argument(
        "--tokenizer",
        help="a tokenizer.json, or a directory holding one, for text prompts (default: a "
        "stand-in tokenizer)",
    )
    sim = p.add_argument_group("simulator only")
    sim.add_argument(
        "--profile",
        help="timing profile: the GPU and host the step times model (listed below; default: "
        "the model's calibrated profile, else roofline:a100-80gb)",
    )
    sim.add_argument(
        "--gpu-memory-bytes",
        type=human_int,
        help="memory of the simulated GPU, e.g. 24G (default: the profile's)",
    )
    sim.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per simulated second: 0.05 runs 20x faster than the GPU would, 0 "
        "never waits (default: 1)",
    )
    sim.add_argument("--worker-id", help="name of this worker in logs, metrics and responses")
    sim.add_argument(
        "--shared-gpu",
        help="a file every worker sharing this worker's GPU names: the GPU is time-sliced among "
        "their steps (kvbench.sim.gpu_share; needs --time-scale > 0)",
    )
    sim.add_argument(
        "--shared-gpu-slot",
        type=int,
        help="this worker's place among the workers of --shared-gpu (0, 1, ...)",
    )
    sim.add_argument(
        "--kv-capacity-jitter",
        type=float,
        default=0.0,
        help="vary a KV cache sized by --gpu-memory-utilization by up to +/- this fraction, "
        "seeded by --seed: the start-to-start spread of real servers (default: 0)",
    )
    sim.add_argument(
        "--load-seconds",
        type=float,
        default=0.0,
        help="wall seconds spent loading before serving, as vLLM loads weights (nothing "
        "listens meanwhile)",
    )
    sim.add_argument(
        "--prefix-cache-stats-at",
        default="admission",
        choices=["admission", "lookup"],
        help="when a prefix-cache lookup enters vllm:prefix_cache_queries/hits: once, at "
        "admission (vLLM after vllm-project/vllm#48860, e.g. 0.31), or at every lookup of a "
        "waiting request, admitted or not (vLLM 0.25 and earlier)",
    )
    http = p.add_argument_group("simulator only: HTTP limits (docs/simulator.md)")
    http.add_argument(
        "--max-request-body-bytes",
        type=human_int,
        help="refuse larger bodies with 413 (default: 64 bytes per token of --max-model-len, "
        "at least 1 MiB; vLLM has no limit)",
    )
    http.add_argument(
        "--http-timeout-keep-alive",
        type=float,
        default=float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5")),
        help="seconds an idle connection stays open, as vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE "
        "(the default); also the time a connection has to complete a request's headers",
    )
    http.add_argument(
        "--request-body-timeout",
        type=float,
        default=60.0,
        help="seconds a request's body has to arrive after its headers (408 after; vLLM "
        "waits forever)",
    )
    return p


def _group_unknown(extras: list[str]) -> list[str]:
    """Pair unknown flags with their values for the warning (``--x v`` or ``--x=v``)."""
    out: list[str] = []
    i = 0
    while i < len(extras):
        item = extras[i]
        if item.startswith("-") and "=" not in item and i + 1 < len(extras):
            nxt = extras[i + 1]
            if not nxt.startswith("-"):
                out.append(f"{item} {nxt}")
                i += 2
                continue
        out.append(item)
        i += 1
    return out


def parse_sim_args(argv: list[str]) -> tuple[SimConfig, list[str]]:
    """``(config, ignored flags)`` from vLLM-style arguments; raises SystemExit on errors."""
    args = list(argv)
    if args and args[0] == "serve":
        args = args[1:]
        if args and not args[0].startswith("-"):
            args = ["--model", args[0], *args[1:]]
    parser = build_parser()  # anew: defaults read the environment (VLLM_HTTP_TIMEOUT_...)
    namespace, extras = parser.parse_known_args(args)
    try:
        config = SimConfig(**vars(namespace))
    except ValidationError as exc:
        parser.error(str(exc))
    return config, _group_unknown(extras)
