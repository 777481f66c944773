"""The report's header says what ran as the records measured it, never as the experiment
configured it: each server start's image or version (the configured image named only beside a
recorded one it matches), the variables kvbench set on server starts and why, and the nodes
of the load generator and the router."""

import io
import shutil
from pathlib import Path

from report_builders import ROOT, example, record, store_of
from rich.console import Console

from kvbench.api import EngineEnvDefault, Point, RunPlacement, RunRecord, parse_experiment
from kvbench.report import render_report
from kvbench.runner import DirectoryStore

P7 = Point(prefixes=7, concurrency=8)
CONFIGURED = "vllm/vllm-openai:v0.31.0"
FLASHINFER = EngineEnvDefault(value="0", reason="flashinfer is not installed")


def _records(images: list[str | None], **update) -> list[RunRecord]:
    """Three runs of two pods each; pod i of run t records images[2 * (t - 1) + i]."""
    runs = []
    for t in (1, 2, 3):
        r = record(t - 1, P7, t, request_hit_rate=0.5)
        pods = [
            p.model_copy(update={"image": images[2 * (t - 1) + i]}) for i, p in enumerate(r.pods)
        ]
        runs.append(r.model_copy(update={"pods": pods, **update}))
    return runs


def _header(tmp: Path, records: list[RunRecord]) -> list[str]:
    store = store_of(tmp, example("prefix-cache-service.yaml"), records)
    return _render(store, tmp)


def _render(store: DirectoryStore, plots: Path) -> list[str]:
    console = Console(record=True, width=400, file=io.StringIO())
    render_report(store, console, plots)
    return [line.strip() for line in console.export_text().splitlines()]


def test_a_local_vllm_run_reports_the_version_it_ran_not_the_configured_image(
    tmp_path: Path,
) -> None:
    """The bug: `engine image vllm/vllm-openai:v0.31.0` for runs whose servers were the
    vLLM installed on the machine (vllm 0.25.0)."""
    images = ["vllm 0.25.0"] * 5 + ["vllm 0.24.1"]
    lines = _header(tmp_path, _records(images))
    assert (
        "Model Qwen/Qwen3-0.6B; engine as the servers reported it: vllm 0.24.1 (1 server "
        "start), vllm 0.25.0 (5 server starts)"
    ) in lines
    assert not [line for line in lines if CONFIGURED in line]


def test_a_cluster_run_names_the_configured_image_where_its_pods_ran_it(tmp_path: Path) -> None:
    images = [CONFIGURED] * 4 + ["docker.io/vllm/vllm-openai:v0.30.0", None]
    lines = _header(tmp_path, _records(images))
    assert (
        "Model Qwen/Qwen3-0.6B; engine as the servers reported it: "
        "docker.io/vllm/vllm-openai:v0.30.0 (1 server start), "
        f"{CONFIGURED} (4 server starts, the configured image), not recorded (1 server start)"
    ) in lines


def test_no_recorded_image_is_never_replaced_by_the_configured_one(tmp_path: Path) -> None:
    lines = _header(tmp_path, _records([None] * 6))
    assert "Model Qwen/Qwen3-0.6B; engine as the servers reported it: not recorded (6 server " \
        "starts)" in lines  # fmt: skip
    assert not [line for line in lines if CONFIGURED in line]


def test_the_variables_kvbench_set_are_one_line_with_how_many_starts(tmp_path: Path) -> None:
    """The bug: they were part of the image string, so they were no line of their own."""
    defaults = {"VLLM_USE_FLASHINFER_SAMPLER": FLASHINFER}
    records = [
        r.model_copy(
            update={
                "pods": [p.model_copy(update={"engine_env_defaults": defaults}) for p in r.pods]
            }
        )
        if r.trial < 3
        else r
        for r in _records(["vllm 0.25.0"] * 6)
    ]
    lines = _header(tmp_path, records)
    assert (
        "kvbench set VLLM_USE_FLASHINFER_SAMPLER=0 on 4 of 6 server starts: flashinfer is not "
        "installed"
    ) in lines
    assert "Model Qwen/Qwen3-0.6B; engine as the servers reported it: vllm 0.25.0 (6 server " \
        "starts)" in lines  # fmt: skip


def test_a_server_start_that_served_several_runs_counts_once(tmp_path: Path) -> None:
    records = _records(["vllm 0.25.0"] * 6)
    records = [
        r.model_copy(
            update={"pods": [p.model_copy(update={"uid": f"u{i}"}) for i, p in enumerate(r.pods)]}
        )
        for r in records
    ]
    lines = _header(tmp_path, records)
    assert "Model Qwen/Qwen3-0.6B; engine as the servers reported it: vllm 0.25.0 (2 server " \
        "starts)" in lines  # fmt: skip
    assert "KV cache per worker: 9,360 tokens in all 2 server starts" in lines


def test_the_header_lists_the_nodes_of_the_load_generator_and_the_router(tmp_path: Path) -> None:
    """The bug: where they ran was read (GPU nodes refused) and reported nowhere."""
    document = example("prefix-cache-service.yaml").model_dump(by_alias=True, exclude_none=True)
    document["spec"]["routing"].append({"name": "rr", "router": {"policy": "round_robin"}})
    experiment = parse_experiment(document)
    service = [
        r.model_copy(update={"placement": RunPlacement(load_generator=node)})
        for r, node in zip(_records(["x"] * 6), ("cpu-0", "cpu-0", "cpu-1"), strict=True)
    ]
    routed = [
        record(3 + i, P7, i + 1, arm="rr", request_hit_rate=0.5).model_copy(
            update={"placement": RunPlacement(load_generator="cpu-1", router=router)}
        )
        for i, router in enumerate(("cpu-2", "cpu-2", None))
    ]
    old = record(6, Point(prefixes=7, concurrency=16), 1, request_hit_rate=0.5)
    lines = _render(store_of(tmp_path, experiment, [*service, *routed, old]), tmp_path)
    assert (
        "Placement: load generator on cpu-0 (2 runs), cpu-1 (4 runs); router (arm rr) on "
        "cpu-2 (2 runs), not recorded (1 run); not recorded for 1 run"
    ) in lines


def test_results_without_placement_print_no_placement_line(tmp_path: Path) -> None:
    lines = _header(tmp_path, _records(["x"] * 6))
    assert not [line for line in lines if line.startswith("Placement")]


def test_the_committed_real_vllm_result_reports_what_ran(tmp_path: Path) -> None:
    """bench/results/real-vllm-arms-6w: 24 starts of the installed vLLM 0.25.0, configured
    image v0.31.0; its records name the flashinfer default in the image (the old form)."""
    results = tmp_path / "real-vllm-arms-6w"
    shutil.copytree(ROOT / "bench" / "results" / "real-vllm-arms-6w", results)
    store = DirectoryStore(results)
    store.load()
    lines = _render(store, tmp_path)
    assert (
        "Model Qwen/Qwen3-0.6B; engine as the servers reported it: vllm 0.25.0 (24 server starts)"
    ) in lines
    assert (
        "kvbench set VLLM_USE_FLASHINFER_SAMPLER=0 on 24 of 24 server starts: a package it needs "
        "is not installed"
    ) in lines
    assert not [line for line in lines if CONFIGURED in line]
