"""The built image, run the way Kubernetes runs it (the chart's securityContext): as its numeric
non-root user on a read-only root file system, writing only to its declared volumes. Its three
programs work there: `kvbench --help`, a `kvbench sim` that answers, a `kvbench loadgen` run
against that simulator."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from image_helpers import ImageRunner, ImageServer

from kvbench.kube.chart import render_chart
from kvbench.loadgen.config import RunConfig
from kvbench.loadgen.results import read_result
from kvbench.testing.image import BuiltImage

pytestmark = pytest.mark.slow  # a cold build (debootstrap, then the image) takes minutes

_WRITE_PROBE = """
import errno, json, os, sys
paths = ["/probe", "/etc/probe", "/usr/probe", "/opt/kvbench/probe", "/tmp/probe", "/data/probe"]
outcome = {}
for path in paths:
    try:
        with open(path, "w") as out:
            out.write("x")
        outcome[path] = "ok"
    except OSError as err:
        outcome[path] = errno.errorcode[err.errno]
ids = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
       "home": os.path.expanduser("~")}
print(json.dumps({"writes": outcome, "ids": ids, "nobytecode": sys.dont_write_bytecode}))
"""

_IMPORT_PROBE = """
import importlib, json, pathlib, sysconfig
site = pathlib.Path(sysconfig.get_paths()["purelib"])
failed, loaded = {}, []
for path in sorted(site.rglob("*.so")):
    parts = path.relative_to(site).parts
    if any(part.endswith(".libs") for part in parts):
        continue  # a wheel's bundled shared library, not a module
    name = ".".join([*parts[:-1], parts[-1].split(".")[0]])
    try:
        importlib.import_module(name)
        loaded.append(name)
    except Exception as err:
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps({"loaded": loaded, "failed": failed}))
"""

_TK_MODULES = {"PIL._imagingtk", "matplotlib.backends._tkagg"}
"""Tk bindings: the image has no Tk (plots are written by the Agg backend)."""

_PLOT_PROBE = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
figure, axes = plt.subplots()
axes.plot([1, 2, 3], [1, 4, 9])
figure.savefig("/data/plot.png")
print(matplotlib.get_cachedir())
"""


def _ids(image: BuiltImage) -> tuple[int, int]:
    uid, gid = image.user.split(":")
    return int(uid), int(gid)


def test_the_chart_runs_the_image_user_on_a_read_only_root(image: BuiltImage) -> None:
    (deployment,) = [m for m in render_chart() if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = {**pod.get("securityContext", {}), **container["securityContext"]}
    assert image.user == f"{context['runAsUser']}:{context['runAsGroup']}"
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert container["command"][0] == image.entrypoint[0] == "kvbench"


def test_help_runs_as_the_image_user(runner: ImageRunner) -> None:
    done = runner.run(["--help"])
    assert done.returncode == 0, done.stderr
    for command in ("operator", "loadgen", "sim"):
        assert f"\n  {command} " in done.stdout
    assert done.stderr == ""


def test_only_the_declared_volumes_are_writable(runner: ImageRunner) -> None:
    image = runner.image
    assert image.volumes == ["/data", "/tmp"]
    found = json.loads(runner.python(_WRITE_PROBE))
    uid, gid = _ids(image)
    ids = found["ids"]
    assert (ids["uid"], ids["gid"], ids["cwd"]) == (uid, gid, "/data")
    assert set(ids["groups"]) <= {gid}  # no supplementary group, root's least of all
    assert uid != 0
    writes = found["writes"]
    # EROFS, not EACCES: the file system refuses, whatever the permissions say
    for path in ("/probe", "/etc/probe", "/usr/probe", "/opt/kvbench/probe"):
        assert writes.pop(path) == "EROFS", path
    assert writes == {"/tmp/probe": "ok", "/data/probe": "ok"}
    assert ids["home"].startswith("/tmp/") or ids["home"] == "/tmp"  # caches land in a volume
    assert found["nobytecode"] is True


def test_every_extension_module_loads(runner: ImageRunner) -> None:
    """The runtime stage has the shared libraries every compiled module needs, and stripping
    their debug sections broke none."""
    found = json.loads(runner.python(_IMPORT_PROBE))
    assert set(found["failed"]) <= _TK_MODULES, found["failed"]
    for name in ("pydantic_core._pydantic_core", "uvloop.loop", "zmq.backend.cython._zmq"):
        assert name in found["loaded"]


def test_plots_keep_their_cache_in_tmp(runner: ImageRunner, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    done = runner.run(["-c", _PLOT_PROBE], {"/data": data}, entrypoint=["python3"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("/tmp/")  # a volume, where MPLCONFIGDIR points
    assert "temporary cache directory" not in done.stderr
    assert (data / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sim_answers_a_completion_as_the_image_user(sim: ImageServer, runner: ImageRunner) -> None:
    uid, gid = _ids(runner.image)
    status = sim.status()
    assert status["Uid"].split() == [str(uid)] * 4
    assert status["Gid"].split() == [str(gid)] * 4
    assert status["Name"] == "kvbench"  # the program itself, in its container
    assert os.stat(f"/proc/{sim.pid()}/root/").st_ino != os.stat("/").st_ino
    body = {"model": "Qwen/Qwen3-0.6B", "prompt": "hello image", "max_tokens": 3}
    response = httpx.post(f"{sim.url}/v1/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["kvbench"]["worker"] == "image-sim"
    assert answer["usage"]["completion_tokens"] == 3
    assert isinstance(answer["choices"][0]["text"], str)


def test_loadgen_writes_its_result_into_the_data_volume(
    sim: ImageServer, runner: ImageRunner, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    config = {
        "model": "Qwen/Qwen3-0.6B",
        "target": {"kind": "url", "url": sim.url},
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
        "timeScale": 0,
    }
    RunConfig.model_validate(config)
    (data / "run.json").write_text(json.dumps(config))
    args = ["loadgen", "--config", "/data/run.json", "--out", "/data/result.json.gz", "--quiet"]
    done = runner.run(args, {"/data": data})
    assert done.returncode == 0, done.stdout + done.stderr
    written = data / "result.json.gz"
    assert (written.stat().st_uid, written.stat().st_gid) == _ids(runner.image)
    result = read_result(written.read_bytes())
    assert result.summary.requests == 12 and result.summary.errors == 0
    measured = [r for r in result.records() if r.phase == "measured"]
    assert {r.sim.worker for r in measured if r.sim} == {"image-sim"}
