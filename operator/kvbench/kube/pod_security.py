"""The restricted Pod Security Standard, checked on a pod (or a workload's pod template).

Kubernetes 1.20, the test cluster's, has no Pod Security admission (1.23+), and a cluster may
run without it, so the profile is checked here: every control of the Baseline and Restricted
profiles as https://kubernetes.io/docs/concepts/security/pod-security-standards/ writes them
(the "latest" version, which is what `pod-security.kubernetes.io/enforce: restricted` means),
on the manifests the operator renders and on the pods the API server admitted. Where the
Restricted profile tightens a Baseline control (capabilities, seccomp, hostPath), the
Restricted rule is the one checked, as the admission plugin does. Nothing is relaxed for Windows
pods or user-namespaced ones (`hostUsers: false`), as the admission plugin would: stricter.
"""

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["pod_of", "restricted_violations"]

Obj = Mapping[str, Any]

_TEMPLATE_PATHS = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
_ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_PROFILE_TYPES = {"RuntimeDefault", "Localhost"}
"""The seccomp and AppArmor profile types both profiles allow (AppArmor: Baseline)."""


def pod_of(manifest: Obj) -> Obj:
    """The pod (metadata and spec) a Pod is, or a workload's pod template."""
    pod: Any = manifest
    for key in _TEMPLATE_PATHS[manifest["kind"]]:
        pod = pod[key]
    return pod


def _containers(spec: Obj) -> Iterator[Obj]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _context(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _host_process(spec: Obj) -> list[str]:
    setters = [_context(spec), *(_context(c) for c in _containers(spec))]
    if any((s.get("windowsOptions") or {}).get("hostProcess") for s in setters):
        return ["HostProcess: windowsOptions.hostProcess must be false or unset"]
    return []


def _host_namespaces(spec: Obj) -> list[str]:
    shared = [key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return [f"Host Namespaces: {key} must be false or unset" for key in shared]


def _privileged(spec: Obj) -> list[str]:
    return [
        f"Privileged Containers: container {c['name']} is privileged"
        for c in _containers(spec)
        if _context(c).get("privileged")
    ]


def _host_ports(spec: Obj) -> list[str]:
    return [
        f"Host Ports: container {c['name']} uses hostPort {port['hostPort']}"
        for c in _containers(spec)
        for port in c.get("ports") or []
        if port.get("hostPort")
    ]


def _apparmor(pod: Obj) -> list[str]:
    spec = pod["spec"]
    problems = [
        f"AppArmor: annotation {key}={value!r}"
        for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items()
        if key.startswith(_APPARMOR_ANNOTATION)
        and value
        and value != "runtime/default"
        and not value.startswith("localhost/")
    ]
    for where, context in [("pod", _context(spec))] + [
        (f"container {c['name']}", _context(c)) for c in _containers(spec)
    ]:
        profile = context.get("appArmorProfile")
        if profile is not None and profile.get("type") not in _PROFILE_TYPES:
            problems.append(f"AppArmor: {where} sets appArmorProfile.type {profile.get('type')}")
    return problems


def _selinux(spec: Obj) -> list[str]:
    problems = []
    for where, context in [("pod", _context(spec))] + [
        (f"container {c['name']}", _context(c)) for c in _containers(spec)
    ]:
        options = context.get("seLinuxOptions") or {}
        if options.get("type", "") not in _SELINUX_TYPES:
            problems.append(f"SELinux: {where} sets seLinuxOptions.type {options['type']}")
        problems += [
            f"SELinux: {where} sets seLinuxOptions.{key}" for key in ("user", "role")
            if options.get(key)
        ]  # fmt: skip
    return problems


def _proc_mount(spec: Obj) -> list[str]:
    return [
        f"/proc Mount Type: container {c['name']} sets procMount {_context(c)['procMount']}"
        for c in _containers(spec)
        if _context(c).get("procMount") not in (None, "Default")
    ]


def _sysctls(spec: Obj) -> list[str]:
    return [
        f"Sysctls: {sysctl['name']} is not a safe sysctl"
        for sysctl in _context(spec).get("sysctls") or []
        if sysctl["name"] not in _SAFE_SYSCTLS
    ]


def _probe_hosts(spec: Obj) -> list[str]:
    problems = []
    for container in _containers(spec):
        lifecycle = container.get("lifecycle") or {}
        handlers = {
            "livenessProbe": container.get("livenessProbe"),
            "readinessProbe": container.get("readinessProbe"),
            "startupProbe": container.get("startupProbe"),
            "lifecycle.postStart": lifecycle.get("postStart"),
            "lifecycle.preStop": lifecycle.get("preStop"),
        }
        for where, handler in handlers.items():
            for kind in ("httpGet", "tcpSocket"):
                if ((handler or {}).get(kind) or {}).get("host"):
                    problems.append(
                        f"Probe or lifecycle host: container {container['name']} {where}.{kind}"
                        " sets host"
                    )
    return problems


def _volume_types(spec: Obj) -> list[str]:
    problems = []
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _ALLOWED_VOLUMES:
            problems.append(f"Volume Types: volume {volume['name']} is {', '.join(sorted(kinds))}")
    return problems


def _privilege_escalation(spec: Obj) -> list[str]:
    return [
        f"Privilege Escalation: container {c['name']} must set allowPrivilegeEscalation false"
        for c in _containers(spec)
        if _context(c).get("allowPrivilegeEscalation") is not False
    ]


def _inherited(spec: Obj, key: str, good: Callable[[Any], bool], control: str) -> list[str]:
    """A field every container must have good, set on the container or inherited from the pod;
    a bad value set anywhere is refused even where another level sets a good one."""
    pod_value = _context(spec).get(key)
    problems = [] if pod_value is None or good(pod_value) else [f"{control}: pod sets {key}"]
    for container in _containers(spec):
        value = _context(container).get(key)
        if value is not None and not good(value):
            problems.append(f"{control}: container {container['name']} sets {key}")
        elif value is None and (pod_value is None or not good(pod_value)):
            problems.append(f"{control}: pod or container {container['name']} must set {key}")
    return problems


def _run_as_non_root(spec: Obj) -> list[str]:
    return _inherited(spec, "runAsNonRoot", lambda v: v is True, "Running as Non-root")


def _run_as_user(spec: Obj) -> list[str]:
    settings = [("pod", _context(spec))] + [
        (f"container {c['name']}", _context(c)) for c in _containers(spec)
    ]
    return [
        f"Running as Non-root user: {where} sets runAsUser 0"
        for where, context in settings
        if context.get("runAsUser") == 0
    ]


def _seccomp(spec: Obj) -> list[str]:
    return _inherited(spec, "seccompProfile", lambda v: v.get("type") in _PROFILE_TYPES, "Seccomp")


def _capabilities(spec: Obj) -> list[str]:
    problems = []
    for container in _containers(spec):
        capabilities = _context(container).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"Capabilities: container {container['name']} must drop ALL")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(
                f"Capabilities: container {container['name']} adds {', '.join(sorted(added))}"
            )
    return problems


_SPEC_CHECKS: tuple[Callable[[Obj], list[str]], ...] = (
    _host_process,
    _host_namespaces,
    _privileged,
    _host_ports,
    _selinux,
    _proc_mount,
    _sysctls,
    _probe_hosts,
    _volume_types,
    _privilege_escalation,
    _run_as_non_root,
    _run_as_user,
    _seccomp,
    _capabilities,
)


def restricted_violations(pod: Obj) -> list[str]:
    """What in `pod` (a Pod or a pod template: metadata and spec) the restricted profile
    forbids, one line per control and place; empty when the pod passes."""
    spec = pod["spec"]
    return [*_apparmor(pod), *(problem for check in _SPEC_CHECKS for problem in check(spec))]
