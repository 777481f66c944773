"""Every pod the operator creates (workers of each kind, router arms, the load generator) and
the chart's operator pod pass the restricted Pod Security Standard, with a read-only root
wherever the image allows; and the check itself refuses each control's violation."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.api import parse_experiment
from kvbench.kube.chart import render_chart
from kvbench.kube.manifests import (
    ExperimentRef,
    load_job,
    load_objects,
    router_objects,
    worker_objects,
)
from kvbench.kube.pod_security import pod_of, restricted_violations
from kvbench.loadgen.config import RunConfig, UrlTarget
from kvbench.plan import plan_experiment
from kvbench.runner.cluster import ChildNames
from kvbench.runner.cluster.kv_events import KvEventFeed

ROOT = Path(__file__).resolve().parents[3]
UID = "0b7e3c9a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
PODS = {"Deployment", "StatefulSet", "Job"}

CACHES = {
    "no cache": None,
    "claim": {"persistentVolumeClaim": "weights"},
    "emptyDir": {"emptyDirSizeLimit": "20Gi"},
}


def _experiment(on_cluster: bool, cache: dict[str, Any] | None = None):
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-kv-aware.yaml").read_text())
    document["spec"]["simulator"] = {"onCluster": on_cluster}
    if cache is not None:
        document["spec"]["engine"]["modelCache"] = cache
    return parse_experiment(document)


def _operator_pods(on_cluster: bool, cache: dict[str, Any] | None = None) -> list[dict]:
    """Every workload the operator makes for one run of each arm: workers, both router
    policies (one with KV event sources), the load generator's Job."""
    experiment = _experiment(on_cluster, cache)
    spec = experiment.spec
    ref = ExperimentRef(name="bx", namespace="bench", uid=UID)
    run = plan_experiment(experiment).runs[0]
    names = ChildNames(experiment="bx", index=run.index, attempt=1)
    config = RunConfig(
        model=spec.engine.model, target=UrlTarget(url="http://svc:8000"),
        workload=spec.workload, point=run.point, seed=run.seed,
    )  # fmt: skip
    results = [f"{names.prefix}-result-0"]
    urls = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    events = {url: url.replace("http", "tcp").replace("8000", "5557") for url in urls}
    feed = KvEventFeed(endpoints=events, block_size=16, model=spec.engine.model)
    routers = [
        m
        for arm in spec.routing
        if arm.router is not None
        for m in router_objects(
            ref, arm.router, names, urls, feed if arm.router.policy == "kv_aware" else None
        )
    ]
    everything = [
        *worker_objects(ref, spec, "default", spec.engine),
        *routers,
        *load_objects(ref, names, config, results),
        load_job(ref, spec, names, results),
    ]
    return [m for m in everything if m["kind"] in PODS]


def _chart_pods() -> list[dict]:
    values = [{}, {"watch": {"allNamespaces": True}}, {"watch": {"namespaces": ["a", "b"]}}]
    return [m for v in values for m in render_chart(v) if m["kind"] in PODS]


@pytest.mark.parametrize("cache", list(CACHES), ids=list(CACHES))
@pytest.mark.parametrize("on_cluster", [False, True], ids=["vllm", "simulator"])
def test_every_pod_the_operator_creates_passes_the_restricted_profile(
    on_cluster: bool, cache: str
) -> None:
    workloads = _operator_pods(on_cluster, CACHES[cache])
    components = sorted(m["metadata"]["labels"]["kvbench.io/component"] for m in workloads)
    assert components == ["loadgen", "router", "router", "worker"]
    for workload in workloads:
        assert restricted_violations(pod_of(workload)) == [], workload["metadata"]["name"]


def test_the_charts_operator_pod_passes_the_restricted_profile() -> None:
    deployments = _chart_pods()
    assert [d["kind"] for d in deployments] == ["Deployment"] * 3
    for deployment in deployments:
        assert restricted_violations(pod_of(deployment)) == []


def test_a_host_path_model_cache_is_the_one_exception_and_named() -> None:
    workloads = _operator_pods(on_cluster=False, cache={"hostPath": "/models"})
    found = {m["metadata"]["name"]: restricted_violations(pod_of(m)) for m in workloads}
    assert found.pop("bx-gpu") == ["Volume Types: volume model-cache is hostPath"]
    assert found and all(v == [] for v in found.values()), found


def _containers(workload: dict) -> dict[str, dict]:
    return {c["name"]: c for c in pod_of(workload)["spec"]["containers"]}


@pytest.mark.parametrize(
    ("on_cluster", "read_only"),
    [(False, {"engine": False, "router": True, "loadgen": True}),
     (True, {"engine": True, "router": True, "loadgen": True})],
    ids=["vllm", "simulator"],
)  # fmt: skip
def test_a_read_only_root_wherever_the_image_writes_only_to_tmp(
    on_cluster: bool, read_only: dict[str, bool]
) -> None:
    """The project's image and vllm-router's write nowhere but /tmp (docs/operator.md, Pod
    hardening); vLLM's image is not known to, so its root stays writable. Where the root is
    read-only, /tmp is an emptyDir, and the run config is mounted read-only."""
    found: dict[str, bool] = {}
    for workload in _operator_pods(on_cluster):
        pod = pod_of(workload)["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for name, container in _containers(workload).items():
            found[name] = container["securityContext"]["readOnlyRootFilesystem"]
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            assert volumes[mounts["/tmp"]["name"]] == {"name": "tmp", "emptyDir": {}}
            if "/config" in mounts:
                assert mounts["/config"]["readOnly"] is True
    assert found == read_only


def test_every_container_runs_as_the_images_user_and_group_never_root() -> None:
    """10001:10001 is the project image's USER; vLLM's image would run as root (group 0)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    for workload in [*_operator_pods(False), *_operator_pods(True)]:
        for container in _containers(workload).values():
            context = container["securityContext"]
            assert (context["runAsUser"], context["runAsGroup"]) == (10001, 10001)


def _passing_pod() -> dict[str, Any]:
    """A pod written out by hand to pass the restricted profile."""
    secure = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "metadata": {"name": "p", "annotations": {}},
        "spec": {
            "securityContext": {},
            "initContainers": [
                {"name": "init", "image": "i", "securityContext": copy.deepcopy(secure)}
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "i",
                    "securityContext": copy.deepcopy(secure),
                    "ports": [{"containerPort": 80}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                },
            ],
            "volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "b", "configMap": {"name": "c"}},
                {"name": "c", "secret": {"secretName": "s"}},
                {"name": "d", "projected": {"sources": []}},
                {"name": "e", "downwardAPI": {"items": []}},
                {"name": "f", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "g", "csi": {"driver": "d"}},
                {"name": "h", "ephemeral": {"volumeClaimTemplate": {}}},
            ],
        },
    }


def _main(pod: dict) -> dict:
    return pod["spec"]["containers"][0]["securityContext"]


def _set(path: str, value: Any):
    """A change to the passing pod: `value` at dotted `path`, where `main`/`init` name the
    containers' security contexts and `pod` the pod's."""

    def change(pod: dict) -> None:
        *parents, last = path.split(".")
        target: Any = pod
        for part in parents:
            if part == "main":
                target = _main(pod)
            elif part == "init":
                target = pod["spec"]["initContainers"][0]["securityContext"]
            elif part == "pod":
                target = pod["spec"]["securityContext"]
            else:
                target = target.setdefault(part, {})
        if value is None:
            del target[last]
        else:
            target[last] = value

    return change


def _add_volume(volume: dict):
    return lambda pod: pod["spec"]["volumes"].append(volume)


def _main_container(key: str, value: Any):
    return lambda pod: pod["spec"]["containers"][0].__setitem__(key, value)


VIOLATIONS = {
    "hostNetwork": (lambda p: p["spec"].__setitem__("hostNetwork", True), "Host Namespaces"),
    "hostPID": (lambda p: p["spec"].__setitem__("hostPID", True), "Host Namespaces"),
    "hostIPC": (lambda p: p["spec"].__setitem__("hostIPC", True), "Host Namespaces"),
    "hostProcess": (_set("init.windowsOptions.hostProcess", True), "HostProcess"),
    "privileged": (_set("main.privileged", True), "Privileged Containers"),
    "add SYS_ADMIN": (_set("main.capabilities.add", ["SYS_ADMIN"]), "Capabilities"),
    "drop not ALL": (_set("init.capabilities.drop", ["NET_RAW"]), "Capabilities"),
    "hostPort": (_main_container("ports", [{"containerPort": 80, "hostPort": 80}]), "Host Ports"),
    "hostPath": (_add_volume({"name": "x", "hostPath": {"path": "/"}}), "Volume Types"),
    "nfs": (_add_volume({"name": "x", "nfs": {"server": "s", "path": "/"}}), "Volume Types"),
    "gitRepo": (_add_volume({"name": "x", "gitRepo": {"repository": "r"}}), "Volume Types"),
    "escalation unset": (_set("main.allowPrivilegeEscalation", None), "Privilege Escalation"),
    "escalation true": (_set("init.allowPrivilegeEscalation", True), "Privilege Escalation"),
    "runAsNonRoot unset": (_set("main.runAsNonRoot", None), "Running as Non-root"),
    "pod runAsNonRoot false": (_set("pod.runAsNonRoot", False), "Running as Non-root"),
    "runAsUser 0": (_set("main.runAsUser", 0), "Running as Non-root user"),
    "pod runAsUser 0": (_set("pod.runAsUser", 0), "Running as Non-root user"),
    "seccomp unset": (_set("main.seccompProfile", None), "Seccomp"),
    "seccomp Unconfined": (_set("init.seccompProfile", {"type": "Unconfined"}), "Seccomp"),
    "pod Unconfined": (_set("pod.seccompProfile", {"type": "Unconfined"}), "Seccomp"),
    "procMount": (_set("main.procMount", "Unmasked"), "/proc Mount Type"),
    "sysctl": (_set("pod.sysctls", [{"name": "kernel.msgmax", "value": "1"}]), "Sysctls"),
    "apparmor annotation": (
        lambda p: p["metadata"]["annotations"].__setitem__(
            "container.apparmor.security.beta.kubernetes.io/main", "unconfined"
        ),
        "AppArmor",
    ),
    "apparmor field": (_set("main.appArmorProfile", {"type": "Unconfined"}), "AppArmor"),
    "selinux type": (_set("pod.seLinuxOptions", {"type": "spc_t"}), "SELinux"),
    "selinux user": (_set("main.seLinuxOptions", {"user": "system_u"}), "SELinux"),
    "probe host": (
        _main_container("readinessProbe", {"httpGet": {"path": "/", "port": 80, "host": "h"}}),
        "Probe or lifecycle host",
    ),
}

ALLOWED = {
    "add NET_BIND_SERVICE": _set("main.capabilities.add", ["NET_BIND_SERVICE"]),
    "Localhost seccomp": _set("main.seccompProfile", {"type": "Localhost"}),
    "seccomp from the pod": lambda p: [
        _set("pod.seccompProfile", {"type": "RuntimeDefault"})(p),
        _set("main.seccompProfile", None)(p),
        _set("init.seccompProfile", None)(p),
    ],
    "runAsNonRoot from the pod": lambda p: [
        _set("pod.runAsNonRoot", True)(p),
        _set("main.runAsNonRoot", None)(p),
        _set("init.runAsNonRoot", None)(p),
    ],
    "runAsUser 10001": _set("main.runAsUser", 10001),
    "safe sysctl": _set("pod.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
    "apparmor runtime/default": lambda p: p["metadata"]["annotations"].__setitem__(
        "container.apparmor.security.beta.kubernetes.io/main", "runtime/default"
    ),
    "selinux container_t": _set("pod.seLinuxOptions", {"type": "container_t", "level": "s0"}),
    "procMount Default": _set("main.procMount", "Default"),
}


def test_the_hand_written_pod_passes() -> None:
    assert restricted_violations(_passing_pod()) == []


@pytest.mark.parametrize("case", list(VIOLATIONS))
def test_each_control_refuses_its_violation_and_only_that_control(case: str) -> None:
    change, control = VIOLATIONS[case]
    pod = _passing_pod()
    change(pod)
    found = restricted_violations(pod)
    assert found, f"{case} passed"
    assert {line.split(":", 1)[0] for line in found} == {control}, found


@pytest.mark.parametrize("case", list(ALLOWED))
def test_what_the_profile_allows_passes(case: str) -> None:
    pod = _passing_pod()
    ALLOWED[case](pod)
    assert restricted_violations(pod) == []
