"""A Cluster that answers at once and remembers every call, for the runner's sequencing tests.

Its load generator "runs" by turning the RunConfig it was given into a real result document:
one measured request per planned request, a share `3.95 / prefixes` of them hits, and counter
deltas on every worker that agree with the responses.
"""

import asyncio
from datetime import UTC, datetime

from kvbench.api import Cleanup, RunPlacement
from kvbench.loadgen.columns import RequestColumns
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.counters import PodDelta
from kvbench.loadgen.loop_monitor import ClientHealth
from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.results import (
    Conditions,
    CounterReport,
    LoadgenResult,
    Window,
    versions,
)
from kvbench.loadgen.summary import summarize_records
from kvbench.runner.cluster import ChildNames, Cluster, LoadState, UrlEndpoint, WorkerInfo
from kvbench.runner.failures import LoadFailed, NoCapacity

PROMPT = 2371


def fake_result(
    config: RunConfig,
    digest: str,
    workers: list[str],
    partial: str | None = None,
    refused: bool = False,
) -> bytes:
    """A result document for `config`: `measured` requests, the article's capacity share of
    them hits (3.95 / prefixes), every worker's counters agreeing with the responses; with
    `refused`, every request failed to connect and no counter moved."""
    prefixes = config.point.prefixes or 1
    measured = config.workload.shared_prefix.requests_for(prefixes)
    hits = round(measured * min(1.0, 3.95 / prefixes))
    records = [
        RequestRecord(
            phase="measured",
            index=i,
            endpoint=config.target.url if hasattr(config.target, "url") else "pods",
            due=i * 0.01,
            start=i * 0.01,
            end=i * 0.01 + 0.2,
            ttft=0.04 if i < hits else 0.11,
            e2e=0.2,
            prompt_tokens=PROMPT,
            output_tokens=10,
            cached_tokens=PROMPT - 11 if i < hits else 0,
            status=200,
        )
        if not refused
        else RequestRecord(
            phase="measured",
            index=i,
            endpoint="fake",
            due=i * 0.01,
            start=i * 0.01,
            end=i * 0.01 + 0.001,
            error_kind="connect",
            error="connection refused",
        )
        for i in range(measured)
    ]
    if refused:
        hits, workers = 0, []
    share = len(workers) or 1
    pods = [
        PodDelta(
            pod=name,
            prefix_cache_queries=measured * PROMPT / share,
            prefix_cache_hits=hits * (PROMPT - 11) / share,
            requests=measured / share,
        )
        for name in workers
    ]
    now = datetime.now(UTC)
    result = LoadgenResult(
        conditions=Conditions(
            run_id=config.run_id,
            model=config.model,
            api=config.api,
            workload=config.workload.kind,
            prompt_format=config.workload.prompt_format,
            point=config.point,
            concurrency=config.point.concurrency,
            seed=config.seed,
            digest=digest,
            warmup_requests=0,
            measured_requests=measured,
            schedule="closed",
            target="fake",
            connection=config.connection,
            versions=versions("asyncio"),
        ),
        window=Window(
            started_at=now, finished_at=now, wall_seconds=measured * 0.01, start=0, end=1
        ),
        summary=summarize_records(
            records, pods or None, measured * 0.01, None, None, config.slo
        ),
        client=ClientHealth(),
        counters=CounterReport(source="direct" if pods else None, pods=pods or None),
        requests=RequestColumns.from_records(records),
        config=config,
        partial=partial,
    )
    return result.encode()


class FakeCluster(Cluster):
    """Records calls; `fail_loads` makes the n-th loads (1-based) fail, `stop_loads` makes
    them end early with a partial result, `disturb` makes the worker check report a restart
    after those loads, `deaf_loads` makes a kv_aware router report no KV event from any worker
    after those loads (three batches from each otherwise), `problems_found` fails the
    preflight."""

    def __init__(
        self,
        fail_loads: set[int] | None = None,
        disturb: set[int] | None = None,
        problems_found: list[str] | None = None,
        stop_loads: set[int] | None = None,
        refused_loads: set[int] | None = None,
        busy_gpus: int = 0,
        deaf_loads: set[int] | None = None,
    ) -> None:
        self.calls: list[str] = []
        self.starts = 0
        self.loads_started = 0
        self.loads_waited = 0
        self.fail_loads = fail_loads or set()
        self.stop_loads = stop_loads or set()
        self.refused_loads = refused_loads or set()
        self.busy_gpus = busy_gpus
        """The first `busy_gpus` worker starts find the GPUs taken (NoCapacity)."""
        self.disturb = disturb or set()
        self.deaf_loads = deaf_loads or set()
        self.problems_found = problems_found or []
        self.configs: dict[str, RunConfig] = {}
        self.states: dict[str, LoadState] = {}
        self.recovered: list[ChildNames | None] = []
        self.hold_load = False

    def problems(self, spec):
        return list(self.problems_found)

    def uses_simulator(self, spec):
        return True

    async def recover(self, keep):
        self.recovered.append(keep)
        self.calls.append(f"recover:{keep.prefix if keep else None}")

    async def start_workers(self, spec, variant, engine, arm, names):
        if self.busy_gpus:
            self.busy_gpus -= 1
            self.calls.append("no-capacity")
            raise NoCapacity("pool gpu needs 6 x 1 nvidia.com/gpu: 0 fit now")
        self.starts += 1
        self.calls.append(f"start:{variant}:{arm.worker_kind}")
        return [
            WorkerInfo(
                name=f"w{i}",
                pool="gpu",
                uid=f"uid-{self.starts}-{i}",
                node="n",
                base_url=f"http://127.0.1.{i}:1",
                metrics_url=f"http://127.0.1.{i}:1/metrics",
                kv_cache_tokens=9360,
                startup_seconds=1.5,
            )
            for i in range(spec.total_workers)
        ]

    async def reset_caches(self, workers):
        self.calls.append("reset")

    async def open_arm(self, spec, arm, workers, names):
        self.calls.append(f"open:{arm.name}")
        return UrlEndpoint(arm=arm.name, url="http://127.0.0.1:9")

    async def close_arm(self):
        self.calls.append("close-arm")

    async def start_load(self, spec, config, names):
        if names.load in self.configs:
            return
        self.loads_started += 1
        self.configs[names.load] = config
        self.calls.append(f"load:{names.load}")
        if self.loads_started in self.fail_loads:
            self.states[names.load] = LoadState(phase="failed", reason="load generator failed")
        else:
            workers = list(config.metrics.pods) if config.metrics else []
            partial = "stopped (SIGTERM)" if self.loads_started in self.stop_loads else None
            refused = self.loads_started in self.refused_loads
            document = fake_result(config, f"sha256:{config.seed:x}", workers, partial, refused)
            self.states[names.load] = LoadState(phase="succeeded", document=document)

    async def load_state(self, names):
        return self.states.get(names.load, LoadState(phase="absent"))

    async def wait_load(self, names, timeout):
        self.loads_waited += 1
        state = self.states.get(names.load, LoadState(phase="absent"))
        if self.hold_load:
            await asyncio.Event().wait()
        if state.phase != "succeeded":
            raise LoadFailed(state.reason or f"{names.load} absent")
        return state.document

    async def release_load(self, names, keep):
        self.calls.append(f"release:{names.load}")

    async def check_workers(self, workers):
        if self.loads_started in self.disturb:
            self.disturb.discard(self.loads_started)
            return [f"{workers[0].name}: restarted"]
        return []

    async def check_arm(self, arm, workers, names):
        if arm.router is None or arm.router.policy != "kv_aware":
            return None
        batches = 0 if self.loads_started in self.deaf_loads else 3
        return {w.name: batches for w in workers}

    async def load_placement(self, arm, names):
        return RunPlacement(
            load_generator="cpu-0", router="cpu-1" if arm.router is not None else None
        )

    async def worker_logs(self, worker):
        return f"first line\nlast line of {worker.name}"

    async def detach(self):
        self.calls.append("detach")

    async def teardown(self, cleanup: Cleanup):
        self.calls.append("teardown")
