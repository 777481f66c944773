"""A real Prometheus (Debian's binary), for tests that read metrics the way a monitoring stack
does: started with a static scrape config, up once `/-/ready` answers. On loopback, or inside
a test cluster node's network namespace, where an in-cluster Prometheus reaches pods and
Service addresses alike."""

import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from kvbench.procs import free_port

__all__ = ["PROMETHEUS", "running_prometheus"]

PROMETHEUS = shutil.which("prometheus")


def _ready(process: subprocess.Popen[bytes], url: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


@contextmanager
def running_prometheus(
    workdir: Path, scrape_configs: str, prefix: Sequence[str] = (), host: str = "127.0.0.1"
) -> Iterator[str]:
    """Prometheus scraping every second with `scrape_configs` (YAML, indented as the list
    under `scrape_configs:`), run behind `prefix` (a node's `nsenter`) and listening on
    `host`; yields its URL. A port taken meanwhile is tried again."""
    assert PROMETHEUS is not None, "the prometheus binary is not installed"
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n{scrape_configs}"
    )
    log_path = workdir / "prometheus.log"
    for _attempt in range(5):
        url = f"http://{host}:{free_port()}"
        with log_path.open("a") as log:
            process = subprocess.Popen(
                [*prefix, PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}",
                 f"--web.listen-address={url.removeprefix('http://')}"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        if _ready(process, url):
            break
        process.terminate()
        process.wait(10)
    else:
        raise RuntimeError(f"Prometheus did not become ready:\n{log_path.read_text()[-2000:]}")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(20)
