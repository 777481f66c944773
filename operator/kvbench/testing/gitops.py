"""How GitOps tools read an experiment's health, for tests on statuses the operator wrote.

Argo CD: the chart's Lua health check, run as Argo CD runs it (Lua 5.1, as gopher-lua is,
with the resource as the global `obj`, JSON nulls absent). Flux and kpt: kstatus's generic
rules (sigs.k8s.io/cli-utils pkg/kstatus/status, `checkGenericProperties` and `Compute`),
which are all kstatus applies to a custom resource.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["HEALTH_LUA", "Health", "argocd_health", "kstatus"]

HEALTH_LUA = (
    Path(__file__).resolve().parents[3] / "charts" / "kvbench-operator" / "files"
    / "argocd-health.lua"
)  # fmt: skip


class Health(BaseModel):
    """A tool's verdict on one resource."""

    status: str
    message: str = ""


def _lua_value(lua: Any, value: Any) -> Any:
    """JSON -> Lua tables, arrays 1-based, nulls left out (gopher-lua's view of a resource)."""
    if isinstance(value, dict):
        return lua.table_from({k: _lua_value(lua, v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return lua.table_from([_lua_value(lua, v) for v in value if v is not None])
    return value


def argocd_health(obj: dict[str, Any], script: Path = HEALTH_LUA) -> Health:
    """The Lua health check's answer for `obj`."""
    from lupa import lua51

    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = _lua_value(lua, obj)
    result = lua.execute(script.read_text())
    return Health(status=result["status"], message=result["message"] or "")


def kstatus(obj: dict[str, Any]) -> Health:
    """kstatus's status of a custom resource: Terminating, InProgress, Failed or Current."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if meta.get("deletionTimestamp"):
        return Health(status="Terminating", message="Resource scheduled for deletion")
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return Health(
            status="InProgress",
            message=f"generation is {generation}, but latest observed generation is {observed}",
        )
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Reconciling" and condition.get("status") == "True":
            return Health(status="InProgress", message=condition.get("message") or "")
        if condition.get("type") == "Stalled" and condition.get("status") == "True":
            return Health(status="Failed", message=condition.get("message") or "")
    return Health(status="Current", message="Resource is current")
