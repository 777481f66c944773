"""The operator killed (its pod deleted with no grace period) once at every step of a run,
across one experiment of twelve runs: every run is still recorded exactly once, on the planned
sequence, with no duplicate Job, and nothing is left once it is deleted.

Twelve runs for seven kills: a kill whose step the driver misses (the operator moved on while
it restarted, or the step is the router arm's) waits for that step in a later run; a loaded
machine once needed three spare runs for that."""

import json
from pathlib import Path

import pytest
from campaign import STEPS, Driver
from experiments import small_experiment
from invariants import check_experiment, delete_leaving_nothing

from kvbench.api import parse_experiment
from kvbench.plan import plan_experiment
from kvbench.testing.cluster import TestCluster
from kvbench.testing.experiments import CPU_NODE_SHARE, apply, wait_phase

pytestmark = pytest.mark.slow

KILLS = len(STEPS)


def test_operator_killed_at_every_step_loses_nothing_and_doubles_nothing(
    cluster: TestCluster, namespace: str, operator: dict, seed: int, tmp_path: Path
) -> None:
    name = "killed"
    document = small_experiment(
        name,
        routing=[{"name": "service", "service": {}},
                 {"name": "router",
                  "router": {"policy": "cache_aware", "resources": CPU_NODE_SHARE}}],
    )  # fmt: skip
    document["spec"]["workload"]["promptFormat"] = "text"
    document["spec"]["load"]["trials"] = 3
    runs = len(plan_experiment(parse_experiment(document)).runs)
    apply(cluster, namespace, document)
    driver = Driver(cluster, namespace, name, seed)
    plan = list(STEPS)
    driver.rng.shuffle(plan)
    for step in plan:
        status = driver.wait_step(step, 600)
        if status is None:
            break
        driver.note("operator killed", step, status)
        driver.kill_operator(operator)
    body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
    (tmp_path / "faults.json").write_text(json.dumps(driver.log, indent=1))
    steps = {entry["step"] for entry in driver.log}
    print(f"operator kills: {len(driver.log)}, steps covered: {sorted(steps)}")
    assert len(driver.log) >= KILLS, f"the experiment ended after {len(driver.log)} kills"
    assert steps == {s.name for s in STEPS}

    verdict = check_experiment(cluster, namespace, body)
    print(f"invariants: {verdict}")
    assert verdict.violations == []
    assert (verdict.planned, verdict.recorded) == (runs, runs) == (12, 12)
    assert body["status"]["phase"] == "Succeeded", body["status"]

    delete_leaving_nothing(cluster, namespace, name)
