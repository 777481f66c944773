"""`kvbench testcluster up` starts a usable cluster, saying what each wait of its start waits
for, and stops all of it on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from kvbench.testing.wait import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster needs root")


def test_testcluster_up_serves_kubectl_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", "from kvbench.cli import main; main()",
             "testcluster", "up", "--gpu-nodes", "1", "--cpu-nodes", "1"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(
            lambda: "Ctrl-C stops everything." in out.read_text() or process.poll() is not None,
            300,
            "the cluster to come up",
        )
        text = out.read_text()
        assert process.poll() is None, text
        started = re.findall(r"^kvbench test cluster: started (\S+): waiting for \S", text, re.M)
        assert started == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        said = re.findall(r"^kvbench test cluster: (waiting for [^(]+?|up in) [(\d]", text, re.M)
        assert said == [
            "waiting for Ready nodes gpu-node-0, cpu-node-0",
            "waiting for the default service account's token",
            "up in",
        ], text
        kubeconfig = Path(re.search(r"^kubeconfig: (\S+)$", text, re.M).group(1))
        kubectl = re.search(r"^kubectl:\s+(\S+)", text, re.M).group(1)
        nodes = subprocess.run(
            [kubectl, f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "name"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert nodes.returncode == 0, nodes.stderr
        assert sorted(nodes.stdout.split()) == ["node/cpu-node-0", "node/gpu-node-0"]
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

        os.kill(process.pid, signal.SIGINT)
        assert process.wait(timeout=120) == 0, out.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "stopping the test cluster" in out.read_text()
    assert not kubeconfig.exists()  # the working directory is gone
    workdir = str(kubeconfig.parent).encode()
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if workdir in _read(p)]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server}/readyz", verify=False, timeout=5)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""
