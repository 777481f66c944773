"""Every process of a deployment is stopped: after use, after a failed start, on Ctrl-C; and
each worker's start-up is timed on its own."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dynamo_helpers import alive, command_line, wait_gone

from kvbench.dynamo import DeploymentSpec, DynamoDeployment, MockerOptions, ModelDir

pytestmark = pytest.mark.timeout(120)


def small(model_path: Path, workers: int = 2) -> DeploymentSpec:
    return DeploymentSpec(
        model_path=model_path,
        workers=workers,
        mocker=MockerOptions(num_gpu_blocks=256, speedup_ratio=10),
        startup_timeout=30,
    )


def test_all_processes_stopped_after_use(model_dir: ModelDir, tmp_path: Path) -> None:
    with DynamoDeployment(small(model_dir.path), tmp_path) as deployment:
        pids = [proc.pid for proc in deployment.processes]
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        frontend, *workers = (command_line(pid) for pid in pids)
        assert frontend[1:3] == ["-m", "dynamo.frontend"]
        assert all(argv[1:3] == ["-m", "dynamo.mocker"] for argv in workers)
        assert [command_line(w.pid) for w in deployment.workers] == workers
        assert all(w.log_path.stat().st_size > 0 for w in deployment.workers)
    assert wait_gone(pids, timeout=1.0) == []


def test_failed_start_stops_what_was_started(tmp_path: Path) -> None:
    deployment = DynamoDeployment(small(tmp_path / "no-such-model"), tmp_path / "scratch")
    with pytest.raises(RuntimeError, match=r"mocker-[01] exited"):
        deployment.start()
    pids = [proc.pid for proc in deployment.processes]
    assert len(pids) == 2
    assert wait_gone(pids, timeout=1.0) == []


def test_each_worker_is_timed_from_its_own_launch(model_dir: ModelDir, tmp_path: Path) -> None:
    """One worker is held back 3 s before its interpreter starts: only its time shows it, and
    no worker is given the whole deployment's time (the frontend starts after them)."""
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f"#!/bin/sh\nif mkdir {tmp_path / 'held'} 2>/dev/null; then sleep 3; fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    spec = small(model_dir.path).model_copy(update={"python": str(wrapper)})
    began = time.monotonic()
    with DynamoDeployment(spec, tmp_path / "scratch") as deployment:
        elapsed = time.monotonic() - began
        fast, slow = sorted(w.startup_seconds for w in deployment.workers)
    assert 0 < fast < slow - 2.5
    assert slow < elapsed


def test_ctrl_c_stops_every_process(model_dir: ModelDir, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from pathlib import Path
        from kvbench.dynamo import DeploymentSpec, DynamoDeployment
        spec = DeploymentSpec.model_validate_json({small(model_dir.path).model_dump_json()!r})
        with DynamoDeployment(spec, Path({str(tmp_path)!r})) as deployment:
            print(json.dumps([p.pid for p in deployment.processes]), flush=True)
            time.sleep(600)
        """
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert runner.stdout is not None
        pids = json.loads(runner.stdout.readline())
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        runner.send_signal(signal.SIGINT)
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert "KeyboardInterrupt" in stderr
    assert wait_gone(pids) == []
