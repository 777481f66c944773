"""The local back end refuses, before starting anything, what it cannot run, naming the field."""

import copy
from pathlib import Path

import yaml

from kvbench.api import parse_experiment
from kvbench.runner.cluster.local.preflight import local_problems

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "prefix-cache-dynamo.yaml").read_text())


def _spec_problems(spec) -> list[str]:
    """Problems of the spec itself, leaving out what this machine has not installed."""
    return [p for p in local_problems(spec) if "is not installed" not in p]


def _problems(change) -> list[str]:
    document = copy.deepcopy(BASE)
    change(document["spec"])
    return _spec_problems(parse_experiment(document).spec)


def test_every_example_runs_locally_as_far_as_the_spec_goes() -> None:
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        spec = parse_experiment(yaml.safe_load(example.read_text())).spec
        assert _spec_problems(spec) == [], example.name


def test_unknown_profile_is_named() -> None:
    problems = _problems(lambda s: s["workers"][0].update(simulation={"profile": "h100-ish"}))
    assert len(problems) == 1
    assert problems[0].startswith("spec.workers[0].simulation.profile: unknown profile")


def test_dynamo_needs_a_kv_size_and_sglang_is_not_local() -> None:
    def change(spec):
        del spec["engine"]["kvCacheMemoryBytes"]
        spec["routing"].append({"name": "sg", "router": {"implementation": "sglang-router",
                                                         "policy": "round_robin"}})  # fmt: skip

    problems = _problems(change)
    assert any("routing[1] (dynamo-random).dynamo" in p and "kvCacheMemoryBytes" in p
               for p in problems)  # fmt: skip
    assert any("routing[3] (sg).router.implementation" in p for p in problems)


def test_a_missing_dynamo_is_named(monkeypatch) -> None:
    from kvbench.runner.cluster.local import preflight

    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda name: None)
    problems = local_problems(parse_experiment(copy.deepcopy(BASE)).spec)
    assert any(
        "routing[1] (dynamo-random).dynamo: NVIDIA Dynamo is not installed" in p for p in problems
    )
