"""What virtual time cannot run: arms whose routing is a real process, and fields that would
mean nothing without processes."""

from kvbench.api import ExperimentSpec
from kvbench.runner.cluster.local.preflight import profile_problems

__all__ = ["virtual_problems"]


def virtual_problems(spec: ExperimentSpec) -> list[str]:
    """Every reason `spec` cannot run in virtual time, each naming its field (empty: it can).

    A router (vllm-router, Dynamo's) decides by what it sees in flight on its own clock and by
    code that is not the simulator's; an external URL is someone else's server. Neither is
    modelled: such arms are refused, not approximated."""
    problems = profile_problems(spec)
    for i, arm in enumerate(spec.routing):
        where = f"spec.routing[{i}] ({arm.name})"
        if arm.router is not None:
            problems.append(
                f"{where}.router: {arm.router.implementation}'s {arm.router.policy} routes by "
                "what a real router process sees in flight, which virtual time does not model; "
                "run this arm without virtual time"
            )
        if arm.dynamo is not None:
            problems.append(
                f"{where}.dynamo: Dynamo's router and workers are real processes, not modelled "
                "in virtual time; run this arm without virtual time"
            )
        if arm.external is not None:
            problems.append(f"{where}.external: an external URL is a real server, not virtual")
    if spec.metrics.source == "prometheus":
        problems.append(
            "spec.metrics.source: virtual workers are read directly (no Prometheus scrapes "
            "them): use direct"
        )
    if spec.cleanup.keep_workers:
        problems.append("spec.cleanup.keepWorkers: virtual workers end with their run")
    return problems
