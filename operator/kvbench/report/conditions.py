"""What an experiment ran, in the words a reader checks a figure against: the model, the
engine flags that change the answer, the hardware (or the simulator's profile), the workload's
shape, the seed and the digest of the requests sent. The same facts, as a dict, are what
`kvbench compare` holds two sides to, with how the Service arms balanced (kube-proxy's mode).

What ran is what the records say (each server start's image or version, the variables
kvbench set on it, the nodes of the load generator and the router), never what the experiment
configured: a local `--engine vllm` run serves whatever vLLM is installed, whatever
`spec.engine.image` says."""

import hashlib
from collections import Counter

from kvbench.api import EngineSpec, ExperimentSpec, PodResult, RunRecord, ServiceBalancing
from kvbench.api.workload import Length, TraceWorkload

__all__ = [
    "BALANCING",
    "arm_notes",
    "conditions",
    "describe",
    "engine_flags",
    "kv_sizes",
    "requests_digest",
    "service_balancing",
    "workload_shape",
]

_DEFAULT = "vLLM default"
BALANCING = "Service balancing"
"""The condition that names how the Service arms balanced (kube-proxy's mode)."""


def engine_flags(engine: EngineSpec) -> str:
    """The flags that change the answer, each written even when left at vLLM's default."""
    kv = (
        f"{engine.kv_cache_memory_bytes:,} B"
        if engine.kv_cache_memory_bytes is not None
        else f"gpuMemoryUtilization {engine.gpu_memory_utilization or 0.9:g}"
    )

    def on_off(value: bool | None) -> str:
        return _DEFAULT + " (on)" if value is None else ("on" if value else "off")

    def number(value: int | None) -> str:
        return _DEFAULT if value is None else f"{value:,}"

    return (
        f"KV cache {kv}, kvCacheDtype {engine.kv_cache_dtype or 'auto'}, "
        f"maxNumSeqs {number(engine.max_num_seqs)}, "
        f"maxNumBatchedTokens {number(engine.max_num_batched_tokens)}, "
        f"maxModelLen {number(engine.max_model_len)}, "
        f"prefix caching {on_off(engine.enable_prefix_caching)}, "
        f"chunked prefill {on_off(engine.enable_chunked_prefill)}, "
        f"full-prompt admission {on_off(engine.scheduler_reserve_full_isl)}, "
        f"async scheduling {on_off(engine.async_scheduling)}, "
        f"enforceEager {'on' if engine.enforce_eager else 'off'}"
    )


def _length(length: Length) -> str:
    if length.distribution == "fixed":
        return f"{length.mean:,}"
    return f"{length.distribution} mean {length.mean:,} ({length.min}-{length.max})"


def _trace_shape(replay: TraceWorkload, records: list[RunRecord]) -> str:
    """A trace replay in one line: each trace the runs replayed (two differ when a file
    changed between runs or experiments, and compare flags it), and how."""
    traces = sorted(
        {(t.source, t.rows, t.sha256[:12], t.input_tokens, t.output_tokens) for r in records
         if (t := r.trace) is not None}
    )  # fmt: skip
    read = "; ".join(
        f"{source}, {rows:,} rows (sha256 {sha}...), mean {n_in:,} in / {n_out:,} out tokens"
        for source, rows, sha, n_in, n_out in traces
    )
    timing = (
        f"timing trace at speedup {replay.speedup:g}"
        if replay.timing == "trace"
        else "timing closed (timestamps ignored)"
    )
    return (
        f"trace replay ({replay.format}): {read or replay.source + ', not recorded'}; "
        f"{replay.block_tokens} tokens per hash id, {timing}"
        + (f", first {replay.max_rows:,} rows" if replay.max_rows is not None else "")
    )


def workload_shape(spec: ExperimentSpec, records: list[RunRecord]) -> str:
    """The requests of one point, in one line (a trace's as the records read it)."""
    w = spec.workload
    if w.trace is not None:
        return _trace_shape(w.trace, records)
    if w.shared_prefix is not None:
        s = w.shared_prefix
        return (
            f"shared prefix: P = {', '.join(map(str, s.prefixes))} distinct prefixes of "
            f"{s.prefix_tokens:,} tokens + a unique {s.suffix_tokens:,}-token suffix, "
            f"{s.output_tokens:,} output tokens; max({s.min_requests}, {s.requests_per_prefix} "
            f"x P) requests per point, {spec.load.warmup.requests_per_prefix} warm-up per prefix; "
            f"popularity {s.popularity.label}"
        )
    if w.random is not None:
        r = w.random
        count = (
            f"{r.requests} requests"
            if r.requests is not None
            else f"{r.requests_per_concurrency or 4} x concurrency requests"
        )
        return (
            f"random prompts: input {_length(r.input_tokens)} tokens, output "
            f"{_length(r.output_tokens)} tokens, {count} per point"
        )
    if w.conversation is not None:
        c = w.conversation
        return (
            f"conversations: {c.conversations} of {c.turns} turns per point (chat), "
            f"{c.user_tokens:,} new user tokens and {c.assistant_tokens:,} answer tokens per "
            f"turn, a {c.system_prompt_tokens:,}-token system prompt shared by all, "
            f"think time {c.think_time}; {spec.load.warmup.requests} warm-up requests"
        )
    assert w.interference is not None
    i = w.interference
    return (
        f"interference: one stream of {i.stream_input_tokens:,} in / "
        f"{i.stream_output_tokens:,} out while {i.prompts} prompts of {i.prompt_tokens:,} "
        "tokens arrive"
    )


def _hardware(spec: ExperimentSpec, records: list[RunRecord]) -> str:
    gpus = sorted({p.gpu_product for r in records for p in r.pods if p.gpu_product})
    pools = []
    for pool in spec.workers:
        profile = (pool.simulation and pool.simulation.profile) or spec.simulator.profile
        notes = [f"profile {profile}"] if profile else []
        shared = pool.simulation.workers_per_gpu if pool.simulation is not None else 1
        if shared > 1 and not gpus:
            notes.append(f"{shared} per simulated GPU, time-sliced")
        pools.append(f"{pool.name} x{pool.replicas}" + (f" ({', '.join(notes)})" if notes else ""))
    where = f"GPUs {', '.join(gpus)}" if gpus else "profiles as listed when simulated"
    return f"{spec.total_workers} workers: {', '.join(pools)}; {where}"


def _server_starts(records: list[RunRecord]) -> list[tuple[str, PodResult]]:
    """Every server start these runs measured, once, with its variant: a start that served
    several runs (workers kept between runs) has one UID; a pod without one counts per run."""
    starts: dict[str, tuple[str, PodResult]] = {}
    for r in records:
        for p in r.pods:
            starts.setdefault(p.uid or f"{r.id}/{p.pod}", (r.variant, p))
    return list(starts.values())


def _starts(n: int) -> str:
    return f"{n} server start{'' if n == 1 else 's'}"


def _engine_line(spec: ExperimentSpec, records: list[RunRecord]) -> str:
    """What the servers were, as each start recorded it (its pod's image on a cluster, the
    version it reported locally), with how many starts each; the configured image is named
    only beside a recorded one it matches."""
    configured = {variant: engine.image for variant, engine in spec.engines().items()}
    counts: Counter[str | None] = Counter()
    as_configured: set[str] = set()
    for variant, pod in _server_starts(records):
        counts[pod.image] += 1
        if pod.image is not None and pod.image == configured.get(variant):
            as_configured.add(pod.image)
    if not counts:
        return "engine not recorded (no server start was measured)"
    parts = []
    for image, n in sorted(counts.items(), key=lambda item: (item[0] is None, item[0] or "")):
        what = "not recorded" if image is None else image
        note = ", the configured image" if image in as_configured else ""
        parts.append(f"{what} ({_starts(n)}{note})")
    return "engine as the servers reported it: " + ", ".join(parts)


def _engine_env_lines(records: list[RunRecord]) -> list[str]:
    """Each variable kvbench set on server starts of its own accord, on how many, and why."""
    starts = _server_starts(records)
    found: Counter[tuple[str, str, str]] = Counter()
    for _, pod in starts:
        for name, default in pod.engine_env_defaults.items():
            found[(name, default.value, default.reason)] += 1
    return [
        f"kvbench set {name}={value} on {n} of {_starts(len(starts))}: {reason}"
        for (name, value, reason), n in sorted(found.items())
    ]


def kv_sizes(records: list[RunRecord]) -> list[int]:
    """Every KV cache size (tokens) a worker reported in these runs."""
    return sorted({p.kv_cache_tokens for r in records for p in r.pods if p.kv_cache_tokens})


def _kv_line(records: list[RunRecord]) -> str:
    sizes = kv_sizes(records)
    if not sizes:
        return "KV cache per worker: not reported"
    starts = sum(1 for _, p in _server_starts(records) if p.kv_cache_tokens)
    if len(sizes) == 1:
        return f"KV cache per worker: {sizes[0]:,} tokens in all {starts} server starts"
    return f"KV cache per worker: {sizes[0]:,}-{sizes[-1]:,} tokens over {starts} server starts"


def requests_digest(records: list[RunRecord]) -> str:
    """One fingerprint of every request sequence sent: two experiments share it only when
    every run (variant, point, trial) sent the same requests in the same order."""
    runs = sorted(f"{r.variant} {r.point.key} {r.trial} {r.digest}" for r in records)
    return hashlib.sha256("\n".join(runs).encode()).hexdigest()[:16]


def service_balancing(records: list[RunRecord]) -> str | None:
    """How the Service arms' connections were balanced in these runs, in words (None: no
    run recorded it, as runs of other arms)."""
    policies = sorted({r.service_balancing.policy for r in records if r.service_balancing})
    return ", ".join(policies) or None


def _balancing_lines(records: list[RunRecord]) -> list[str]:
    """Each balancing the Service arms ran with, what set it and where that was read."""
    runs: dict[str, tuple[ServiceBalancing, list[RunRecord]]] = {}
    for r in records:
        if r.service_balancing is not None:
            key = r.service_balancing.model_dump_json()
            runs.setdefault(key, (r.service_balancing, []))[1].append(r)
    lines = []
    for balancing, of in runs.values():
        what = (
            "the local stand-in"
            if balancing.mode == "local-random"
            else f"kube-proxy mode {balancing.mode}"
            + (f", scheduler {balancing.scheduler}" if balancing.scheduler else "")
        )
        arms = ", ".join(sorted({r.arm for r in of}))
        lines.append(
            f"Service balancing (arm {arms}, {len(of)} runs): {balancing.policy}, by {what} "
            f"({balancing.source})"
        )
    return lines


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def _placement_line(spec: ExperimentSpec, records: list[RunRecord]) -> str | None:
    """The distinct nodes the load generator and (router arms) the router ran on, with how
    many runs each (None: no record says, as results from before records kept it)."""
    placed = [r for r in records if r.placement is not None]
    if not placed:
        return None
    routers = {arm.name for arm in spec.routing if arm.router is not None}

    def nodes(found: Counter[str | None]) -> str:
        ordered = sorted(found.items(), key=lambda item: (item[0] is None, item[0] or ""))
        return ", ".join(
            f"{'not recorded' if node is None else node} ({_runs(n)})" for node, n in ordered
        )

    loads: Counter[str | None] = Counter(r.placement.load_generator for r in placed if r.placement)
    line = f"Placement: load generator on {nodes(loads)}"
    routed = [r for r in placed if r.arm in routers]
    if routed:
        found: Counter[str | None] = Counter(r.placement.router for r in routed if r.placement)
        arms = ", ".join(sorted({r.arm for r in routed}))
        line += f"; router (arm {arms}) on {nodes(found)}"
    if len(placed) < len(records):
        line += f"; not recorded for {_runs(len(records) - len(placed))}"
    return line


def describe(spec: ExperimentSpec, records: list[RunRecord]) -> list[str]:
    """What the experiment ran, line by line."""
    lines = [f"Model {spec.engine.model}; {_engine_line(spec, records)}"]
    lines += _engine_env_lines(records)
    for variant, engine in spec.engines().items():
        lines.append(f"Variant {variant}: {engine_flags(engine)}")
    placement = _placement_line(spec, records)
    lines += [
        _kv_line(records),
        _hardware(spec, records),
        f"Workload: {workload_shape(spec, records)}",
        f"Load: concurrency {', '.join(map(str, spec.load.concurrency))}; "
        f"{spec.load.trials} trials (median reported); seed {spec.load.seed}; "
        f"connection {spec.load.connection}",
        *_balancing_lines(records),
        *([placement] if placement else []),
        f"Requests digest {requests_digest(records)} (of every run's request sequence; "
        "each run's own digest is in its record)",
    ]
    return lines


def _clock(records: list[RunRecord], spec: ExperimentSpec) -> str:
    clocks = sorted({r.summary.latency_clock for r in records})
    if clocks == ["wall"]:
        return "wall clock"
    if spec.simulator.mode == "virtual":
        return "virtual time (a discrete-event simulation: every time simulated)"
    scale = f"{'/'.join(clocks)} clock, time scale {spec.simulator.time_scale:g}"
    routed = {r.arm for r in records} & {
        a.name for a in spec.routing if spec.simulator.time_scale_of(a) != spec.simulator.time_scale
    }
    if routed and spec.simulator.router_time_scale is not None:
        scale += f" ({', '.join(sorted(routed))}: {spec.simulator.router_time_scale:g})"
    return scale


def conditions(spec: ExperimentSpec, records: list[RunRecord]) -> dict[str, str]:
    """The conditions that change the answer, by name, for `kvbench compare`."""
    engines = spec.engines()
    return {
        "model": spec.engine.model,
        "engine flags": "; ".join(f"{v}: {engine_flags(e)}" for v, e in engines.items()),
        "KV cache sizes": ", ".join(f"{n:,}" for n in kv_sizes(records)) or "not reported",
        "workers": str(spec.total_workers),
        "workload": workload_shape(spec, records),
        "objectives": spec.slo.label if spec.slo is not None else "none",
        "time scale": _clock(records, spec),
        "requests digest": requests_digest(records),
    } | ({BALANCING: balancing} if (balancing := service_balancing(records)) else {})


def _outside_note(records: list[RunRecord], arms: list[str]) -> str:
    """Which arms' simulated TTFTs hold the wall time outside the server (those in real time),
    with each one's range of per-run medians, in ms."""
    parts = []
    for arm in arms:
        values = [
            r.summary.outside_server_p50
            for r in records
            if r.arm == arm and r.summary.outside_server_p50 is not None
        ]
        if values:
            low, high = 1000 * min(values), 1000 * max(values)
            span = f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}"
            parts.append(f"{arm} {span} ms")
    if not parts:
        return ""
    return (
        " In real time, an arm's TTFT and e2e hold the wall time each request spent outside "
        "the server (client, connection, router), as on the hardware; median per run: "
        f"{', '.join(parts)}. Sped up, they leave it out."
    )


def _hop_note(records: list[RunRecord]) -> str | None:
    """On the wall clock (real servers), each arm's range over runs of its client mean TTFT
    less its servers' own (their TTFT histograms): the network, a Service proxy, a router."""
    spans: dict[str, list[float]] = {}
    for r in records:
        s = r.summary
        if s.latency_clock == "wall" and s.ttft_mean is not None and s.server_ttft_mean is not None:
            spans.setdefault(r.arm, []).append(s.ttft_mean - s.server_ttft_mean)
    if not spans:
        return None
    parts = []
    for arm, values in sorted(spans.items()):
        low, high = 1000 * min(values), 1000 * max(values)
        span = f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}"
        parts.append(f"{arm} {span} ms")
    return (
        "Mean TTFT at the client less the servers' own (their vllm:time_to_first_token_seconds "
        "histograms, receipt to first token), per run: what the network, a Service proxy or a "
        f"router in front add: {', '.join(parts)}."
    )


def arm_notes(spec: ExperimentSpec, records: list[RunRecord]) -> list[str]:
    """What each arm's figures are, by what serves it: the simulator's clock only for arms
    on the simulator, Dynamo's mocker only for Dynamo arms, an external arm as itself."""
    kinds = {arm.name: arm for arm in spec.routing}
    by_arm: dict[str, set[str]] = {}
    for r in records:
        by_arm.setdefault(r.arm, set()).add(r.summary.latency_clock)
    notes = []
    scale = spec.simulator.time_scale
    simulated = sorted(a for a, clocks in by_arm.items() if "simulated" in clocks)
    if simulated and spec.simulator.mode == "virtual":
        notes.append(
            f"Arms {', '.join(simulated)}: virtual time (kvbench run --virtual): workers, arm "
            "and clients in one discrete-event simulation; every latency is simulated, none "
            "measured, and no wall clock was involved."
        )
    elif simulated:
        notes.append(
            f"Arms {', '.join(simulated)}: latencies in simulated seconds (kvbench sim, time "
            f"scale {scale:g}: one simulated second took {scale:g} s of wall time)."
            + _outside_note(records, simulated)
        )
    for name, clocks in sorted(by_arm.items()):
        arm = kinds.get(name)
        if arm is None:
            continue
        own = spec.simulator.time_scale_of(arm)
        if arm.router is not None and "wall" not in clocks and own < 1:
            notes.append(
                f"Arm {name} routes through a process that balances by the requests in flight "
                f"on the wall clock, at time scale {own:g}: its own latency and this machine's "
                "load were not scaled with the simulated times, so its choices may differ from "
                "those on the hardware the profile describes (simulator.routerTimeScale: 1 "
                "runs it in real time; docs/simulator.md)."
            )
        elif own != scale and "wall" not in clocks:
            notes.append(f"Arm {name} ran at time scale {own:g} (simulator.routerTimeScale).")
        if arm.dynamo is not None and "scaled" in clocks:
            notes.append(
                f"Arm {name} runs Dynamo's mocker, which reports no clock of its own: its "
                f"latencies are wall time / {own:g}, which multiplies the real overhead of "
                "the frontend and the client too. Compare its hit rates with every arm, its "
                "latencies only with other mocker arms."
            )
        if arm.external is not None:
            clock = {
                "simulated": "the simulator's own clock",
                "scaled": f"wall time / {scale:g} (the run's time scale)",
                "wall": "wall time",
            }
            told = ", ".join(clock.get(c, c) for c in sorted(clocks))
            notes.append(
                f"Arm {name} is an external server ({arm.external.url}), which kvbench neither "
                f"starts nor knows: its latencies are {told}; its hit rate is what it reports "
                "(requests, when its responses carry cached tokens; tokens, from the counters "
                "of the pods its podSelector picks)."
            )
    if (hop := _hop_note(records)) is not None:
        notes.append(hop)
    return notes
