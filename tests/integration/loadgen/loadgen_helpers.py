"""Helpers of the load generator's proof tests: a small run config and a simulator process."""

import os
import re
import subprocess
import sys
import time
from typing import Any

import httpx

from kvbench.loadgen.config import RunConfig

__all__ = ["Sim", "small_config"]

_LISTEN = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def small_config(url: str, **overrides: Any) -> RunConfig:
    """Three prefixes of 64 tokens, 12 measured requests of 8 output tokens, concurrency 4."""
    data: dict[str, Any] = {
        "model": "Qwen/Qwen3-0.6B",
        "target": {"kind": "url", "url": url},
        "workload": {
            "sharedPrefix": {
                "prefixes": [3],
                "prefixTokens": 64,
                "suffixTokens": 16,
                "outputTokens": 8,
                "requestsPerPrefix": 4,
                "minRequests": 12,
            }
        },
        "point": {"concurrency": 4, "prefixes": 3},
        "seed": 11,
    }
    data.update(overrides)
    return RunConfig.model_validate(data)


class Sim:
    """One `kvbench sim` process on an ephemeral loopback port."""

    def __init__(self, name: str, *flags: str) -> None:
        self.name = name
        cmd = [
            sys.executable, "-m", "kvbench.sim", "--host", "127.0.0.1", "--port", "0",
            "--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096",
            "--kv-cache-memory-bytes", "1073741824", "--gpu-memory-utilization", "0.01",
            "--enable-prompt-tokens-details", "--worker-id", name, *flags,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy()
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        seen = b""
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            seen += line
            if match := _LISTEN.search(line):
                self.port = int(match.group(1))
                break
            if not line and self.proc.poll() is not None:
                break
        else:
            self.stop()
            raise RuntimeError(f"simulator {name} did not start: {seen.decode()[-2000:]}")
        if not hasattr(self, "port"):
            raise RuntimeError(f"simulator {name} exited: {seen.decode()[-2000:]}")
        httpx.get(f"{self.url}/health", timeout=10).raise_for_status()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
