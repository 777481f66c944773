"""What the local back end checks before it starts anything, so a spec it cannot run fails at
once, naming the field, instead of after hours of finished runs.

`shared_problems` holds for every kind of local worker; `local_problems` is the whole check
for simulated workers (the default), `vllm_workers.py` adds real vLLM's own to the shared one.
"""

import importlib.util

from kvbench.api import ExperimentSpec
from kvbench.runner.cluster.local.arms import router_binary
from kvbench.sim.timing import resolve_profile

__all__ = ["local_problems", "profile_problems", "shared_problems"]


def local_problems(spec: ExperimentSpec) -> list[str]:
    """Every reason this machine cannot run `spec` with simulated workers (empty: it can)."""
    problems = profile_problems(spec)
    problems += shared_problems(spec)
    for i, arm in enumerate(spec.routing):
        where = f"spec.routing[{i}] ({arm.name})"
        if arm.dynamo is not None:
            if importlib.util.find_spec("dynamo") is None:
                problems.append(f"{where}.dynamo: NVIDIA Dynamo is not installed: run "
                                "scripts/install-dynamo.sh")  # fmt: skip
            for variant, engine in spec.engines().items():
                if engine.kv_cache_memory_bytes is None:
                    problems.append(
                        f"{where}.dynamo: dynamo.mocker takes a KV block count: set "
                        f"engine.kvCacheMemoryBytes (variant {variant})"
                    )
    if spec.cleanup.keep_workers and any(a.dynamo is not None for a in spec.routing):
        problems.append(
            "spec.cleanup.keepWorkers: local Dynamo deployments stop with kvbench run; "
            "drop keepWorkers or the dynamo arms"
        )
    return problems


def profile_problems(spec: ExperimentSpec) -> list[str]:
    """Timing profiles the simulator does not know, by field."""
    problems = []
    profiles = [("simulator.profile", spec.simulator.profile)] + [
        (f"workers[{i}].simulation.profile", pool.simulation.profile if pool.simulation else None)
        for i, pool in enumerate(spec.workers)
    ]
    for field, name in profiles:
        if name is not None:
            try:
                resolve_profile(name)
            except ValueError as err:
                problems.append(f"spec.{field}: {err}")
    return problems


def shared_problems(spec: ExperimentSpec) -> list[str]:
    """What no kind of local worker can run: other routers, Prometheus, a cluster's Secrets."""
    problems = []
    for i, arm in enumerate(spec.routing):
        where = f"spec.routing[{i}] ({arm.name})"
        if arm.router is not None:
            if arm.router.implementation != "vllm-router":
                problems.append(f"{where}.router.implementation: only vllm-router runs locally")
            try:
                router_binary()
            except RuntimeError as err:
                problems.append(f"{where}.router: {err}")
    if spec.metrics.source == "prometheus":
        problems.append(
            "spec.metrics.source: prometheus reads counters from a Prometheus that scrapes the "
            "pods; no Prometheus scrapes local workers: use direct"
        )
    for variant, engine in spec.engines().items():
        for var in engine.env:
            if var.value_from is not None:
                problems.append(
                    f"spec.engine.env ({var.name}, variant {variant}): valueFrom reads a "
                    "cluster's Secret or ConfigMap; locally give a value"
                )
    return problems
