"""The simulator as a process: vLLM flags, start-up log lines, health, clean shutdown;
and the time scale: the same requests give the same virtual timings at any speed."""

import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from sim_http_harness import running_sim

from kvbench.sim.args import parse_sim_args


def _start(*args: str) -> tuple[subprocess.Popen, int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench.sim", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline, seen = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if not line and proc.poll() is not None:
            pytest.fail(f"simulator exited: {proc.stdout.read()}")
        match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
        if match:
            return proc, int(match.group(1)), "".join(seen)
    proc.kill()
    pytest.fail("simulator did not report its port")


def test_serve_form_with_vllm_flags_logs_capacity_and_serves():
    proc, port, head = _start(
        "serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", "0",
        "--max-model-len", "4096", "--kv-cache-memory-bytes", "1073741824",
        "--gpu-memory-utilization", "0.01", "--disable-log-requests",
        "--tensor-parallel-size", "1", "--time-scale", "0", "--worker-id", "w0",
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(50):
            if httpx.get(url + "/health").status_code == 200:
                break
            time.sleep(0.1)
        r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert r.json()["kvbench"]["worker"] == "w0"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "Available KV cache memory: 1.00 GiB" in out
    assert "GPU KV cache size: 9,360 tokens" in out
    assert "Maximum concurrency for 4,096 tokens per request: 2.29x" in out
    assert "Ignoring vLLM argument the simulator does not model: --disable-log-requests" in out
    assert "--tensor-parallel-size 1" in out
    assert "Application startup complete." in head
    assert "Finished server process" in err


def test_too_small_cache_exits_with_vllm_error():
    proc = subprocess.run(
        [sys.executable, "-m", "kvbench.sim", "--model", "Qwen/Qwen3-8B", "--port", "0",
         "--kv-cache-memory-bytes", "64M", "--max-model-len", "32k"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "To serve at least one request with the models's max seq len (32000)" in proc.stdout


def test_argument_forms():
    a, ignored = parse_sim_args(
        ["serve", "Qwen/Qwen3-1.7B", "--no-enable-prefix-caching",
         "--swap-space", "4", "--enforce-eager", "--max-model-len=8k"]
    )  # fmt: skip
    b, _ = parse_sim_args(
        ["--model", "Qwen/Qwen3-1.7B", "--kv-cache-dtype", "fp8",
         "--served-model-name", "a", "b", "--max-num-batched-tokens", "1K"]
    )  # fmt: skip
    assert a.model == b.model == "Qwen/Qwen3-1.7B"
    assert not a.enable_prefix_caching and a.enforce_eager and a.max_model_len == 8000
    assert ignored == ["--swap-space 4"]
    assert b.served_model_names == ["a", "b"] and b.max_num_batched_tokens == 1024
    assert b.kv_cache_dtype == "fp8" and b.enable_prefix_caching


def _serial_timings(time_scale: float) -> list[list[float]]:
    with running_sim(time_scale=time_scale) as sim:
        out = []
        for i in range(3):
            body = {"prompt": list(range(100 * i, 100 * i + 300)), "max_tokens": 4}
            t = sim.post("/v1/completions", body).json()["kvbench"]
            out.append(
                [x - t["arrival_time"] for x in (t["first_scheduled_time"], *t["token_times"])]
            )
        return out


def test_virtual_timings_do_not_depend_on_the_time_scale():
    """At S = 1 the modelled frontend latency (22 ms here) covers the server's own work on the
    request, so the engine sees it when stamped; at a small S that is a fraction of a
    millisecond of wall time, which a loaded machine overruns (the engine then sees the
    request when it was handed over, later in virtual time)."""
    fast, scaled = _serial_timings(0.0), _serial_timings(1.0)
    for a, b in zip(fast, scaled, strict=True):
        assert b == pytest.approx(a, abs=1e-9)


def test_sigterm_while_loading_ends_the_server_at_once():
    """As vLLM's start-up handler does: a container's PID 1 ignores a TERM it has no handler
    for, so without one a pod deleted while loading would wait out its grace period."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench.sim", "--model", "Qwen/Qwen3-0.6B", "--port", "0",
         "--kv-cache-memory-bytes", "1G", "--max-model-len", "4096", "--load-seconds", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        while "Loading model weights" not in (line := proc.stdout.readline()):
            assert line, "the simulator exited before loading"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Terminated while loading" in out
    assert "Uvicorn running" not in err
