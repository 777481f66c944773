"""Each arm is described by what serves it: simulated seconds only for simulator arms,
Dynamo's mocker only for Dynamo arms, an external arm as external, with its token hit rate."""

import io
from pathlib import Path

from report_builders import example, record, store_of
from rich.console import Console

from kvbench.api import Point
from kvbench.report import render_report
from kvbench.report.conditions import arm_notes

P8 = Point(prefixes=8, concurrency=16)
EXTERNAL = {"name": "ext", "external": {"url": "http://127.0.0.1:9", "podSelector": {"a": "b"}}}


def _experiment():
    base = example("prefix-cache-dynamo.yaml")
    routing = [a.to_k8s() for a in base.spec.routing] + [EXTERNAL]
    return example("prefix-cache-dynamo.yaml", routing=routing)


def _records():
    return [
        record(0, P8, 1, arm="service", request_hit_rate=0.5, latency_clock="simulated"),
        record(1, P8, 1, arm="dynamo-kv", request_hit_rate=0.8, latency_clock="scaled"),
        record(2, P8, 1, arm="ext", token_hit_rate=0.4, latency_clock="scaled"),
    ]


def test_notes_name_each_arm_by_its_server() -> None:
    experiment = _experiment()
    notes = arm_notes(experiment.spec, _records())
    simulated = [n for n in notes if "simulated seconds" in n]
    assert len(simulated) == 1 and simulated[0].startswith("Arms service:")
    assert "dynamo-kv" not in simulated[0] and "ext" not in simulated[0]
    mocker = [n for n in notes if "mocker" in n]
    assert len(mocker) == 1 and mocker[0].startswith("Arm dynamo-kv ")
    external = [n for n in notes if n.startswith("Arm ext ")]
    assert len(external) == 1
    assert "external server (http://127.0.0.1:9)" in external[0]
    assert "mocker" not in external[0] and "simulated seconds" not in external[0]


def test_a_wall_clock_report_never_says_simulated(tmp_path: Path) -> None:
    records = [r.model_copy(update={"summary": r.summary.model_copy(
        update={"latency_clock": "wall"})}) for r in _records()]  # fmt: skip
    notes = arm_notes(_experiment().spec, records)
    assert not any("simulated" in n or "mocker" in n for n in notes)


def test_the_external_arm_shows_its_token_hit_rate(tmp_path: Path) -> None:
    store = store_of(tmp_path, _experiment(), _records())
    console = Console(record=True, width=300, file=io.StringIO())
    plots = render_report(store, console, tmp_path)
    text = console.export_text()
    ext = [line for line in text.splitlines() if "ext / default" in line and "│        8 │" in line]
    assert len(ext) == 1 and "- | 40.0 %" in ext[0]
    assert tmp_path / "hit_rate.png" in plots


def _router_experiment(simulator: dict):
    routing = [{"name": "service", "service": {}},
               {"name": "cache-aware", "router": {"policy": "cache_aware"}}]  # fmt: skip
    return example("prefix-cache-kv-aware.yaml", routing=routing, simulator=simulator)


def _router_records():
    return [
        record(0, P8, 1, arm="service", request_hit_rate=0.5, latency_clock="simulated"),
        record(1, P8, 1, arm="cache-aware", request_hit_rate=0.8, latency_clock="simulated"),
    ]


def test_a_router_arm_below_real_time_is_said_to_follow_the_machine() -> None:
    """Catches a report silent where a router's choices may follow this machine's speed (a
    router arm at time scale < 1), or one that says so of an arm in real time."""
    fast = arm_notes(_router_experiment({"routerTimeScale": 0.05}).spec, _router_records())
    said = [n for n in fast if n.startswith("Arm cache-aware ")]
    assert len(said) == 1 and "time scale 0.05" in said[0] and "may differ" in said[0]
    real = arm_notes(_router_experiment({"timeScale": 0.05}).spec, _router_records())
    assert [n for n in real if n.startswith("Arm cache-aware ")] == [
        "Arm cache-aware ran at time scale 1 (simulator.routerTimeScale)."
    ]
    assert not any(n.startswith("Arm service ") for n in fast + real)


def test_the_simulated_clock_note_gives_each_arm_its_time_outside_the_server() -> None:
    """Catches a report that quotes simulated TTFTs without saying they hold real wall time
    (a router's hop), or that mixes one arm's figure into another's."""
    P16 = Point(prefixes=16, concurrency=16)
    records = [
        record(0, P8, 1, arm="service", latency_clock="simulated", outside_server_p50=0.0031),
        record(1, P8, 1, arm="cache-aware", latency_clock="simulated", outside_server_p50=0.011),
        record(2, P16, 1, arm="cache-aware", latency_clock="simulated", outside_server_p50=0.013),
    ]
    notes = arm_notes(_router_experiment({"timeScale": 0.05}).spec, records)
    simulated = [n for n in notes if "simulated seconds" in n]
    assert len(simulated) == 1
    assert "outside the server" in simulated[0]
    assert "median per run: cache-aware 11.0-13.0 ms, service 3.1 ms." in simulated[0]
    sped_up = [r.model_copy(update={"summary": r.summary.model_copy(
        update={"outside_server_p50": None})}) for r in records]  # fmt: skip
    quiet = arm_notes(_router_experiment({"timeScale": 0.05}).spec, sped_up)
    assert not any("outside the server" in n for n in quiet)


def test_on_the_wall_clock_each_arm_says_what_is_added_in_front_of_its_servers() -> None:
    """Real vLLM: the client's mean TTFT less the servers' own histogram mean, per arm. Catches
    a report that leaves the router's hop inside the TTFT unsaid, or mixes two arms' hops."""
    records = [
        record(
            0, P8, 1, arm="service", ttft_mean=0.0440, latency_clock="wall", server_ttft_mean=0.0410
        ),
        record(
            1,
            P8,
            1,
            arm="cache-aware",
            ttft_mean=0.0560,
            latency_clock="wall",
            server_ttft_mean=0.0420,
        ),
        record(
            2,
            P8,
            2,
            arm="cache-aware",
            ttft_mean=0.0600,
            latency_clock="wall",
            server_ttft_mean=0.0440,
        ),
        record(3, P8, 3, arm="affinity", ttft_mean=0.0400, latency_clock="wall"),
    ]
    notes = arm_notes(_router_experiment({"timeScale": 1}).spec, records)
    (hop,) = [n for n in notes if n.startswith("Mean TTFT at the client")]
    assert hop.endswith("add: cache-aware 14.0-16.0 ms, service 3.0 ms.")
    simulated = [r.model_copy(update={"summary": r.summary.model_copy(
        update={"latency_clock": "simulated"})}) for r in records]  # fmt: skip
    assert not any("Mean TTFT at the client" in n for n in arm_notes(
        _router_experiment({"timeScale": 1}).spec, simulated))  # fmt: skip
