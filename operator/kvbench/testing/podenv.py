"""A container's environment, resolved as the kubelet does, and `$(VAR)` expansion.

Values, fieldRefs (pod IP, name, namespace, labels...), configMapKeyRef,
secretKeyRef and envFrom are supported; a missing required key is a
`ContainerConfigError`, which the pod reports as CreateContainerConfigError.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ContainerConfigError", "Fetch", "expand", "resolve_env"]

Obj = dict[str, Any]
Fetch = Callable[[str, str, str], Awaitable[Obj | None]]
"""fetch(kind, namespace, name): the ConfigMap or Secret ("configmaps"/"secrets"), or None."""

_REF = re.compile(r"\$\((\w+)\)|\$\$")
_LABEL_PATH = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


class ContainerConfigError(ValueError):
    """The container cannot start until its configuration exists."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: known names are replaced, `$$` is a literal `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REF.sub(replace, text)


def _field(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(ip["ip"] for ip in status.get("podIPs", [])),
    }
    if path in simple:
        return simple[path] or ""
    match = _LABEL_PATH.fullmatch(path)
    if match:
        return meta.get(match.group(1), {}).get(match.group(2), "")
    raise ContainerConfigError(f"unsupported fieldRef {path!r}")


async def _data(fetch: Fetch, kind: str, namespace: str, name: str, optional: bool) -> Obj:
    obj = await fetch(kind, namespace, name)
    if obj is None:
        if optional:
            return {}
        raise ContainerConfigError(f"{kind[:-1]} {namespace}/{name} not found")
    data = dict(obj.get("data") or {})
    if kind == "secrets":
        return {k: base64.b64decode(v).decode() for k, v in data.items()}
    return data


async def _value_from(source: Obj, pod: Obj, fetch: Fetch) -> str | None:
    namespace = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return _field(pod, source["fieldRef"]["fieldPath"])
    for field, kind in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
        if field in source:
            ref = source[field]
            optional = bool(ref.get("optional", False))
            data = await _data(fetch, kind, namespace, ref["name"], optional)
            if ref["key"] in data:
                return str(data[ref["key"]])
            if optional:
                return None
            raise ContainerConfigError(f"key {ref['key']!r} not in {kind[:-1]} {ref['name']}")
    raise ContainerConfigError(f"unsupported valueFrom {sorted(source)}")


async def resolve_env(
    container: Obj, pod: Obj, fetch: Fetch, base: dict[str, str]
) -> dict[str, str]:
    """`base` (the agent's defaults) overlaid with envFrom, then env, in order."""
    namespace = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        for field, kind in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
            if field in source:
                ref = source[field]
                data = await _data(fetch, kind, namespace, ref["name"], ref.get("optional", False))
                env.update({prefix + k: str(v) for k, v in data.items()})
    for var in container.get("env", []):
        if "valueFrom" in var:
            value = await _value_from(var["valueFrom"], pod, fetch)
            if value is None:
                continue
        else:
            value = expand(var.get("value", ""), env)
        env[var["name"]] = value
    return env
