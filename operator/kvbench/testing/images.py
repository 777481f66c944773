"""Which local program stands in for each container image.

The node agent runs no images: a small explicit table maps an image's repository
to a launcher that turns the container's command and args into a local argv.
Servers are told to bind their pod's loopback IP, since every pod shares the
machine's network. An image not in the table is refused with a clear error.

The router image runs what it runs in a cluster: the pinned wheel's `vllm-router` launcher
with the pod's args. Upstream's `vllm/vllm-router` has no stand-in: its Rust binary refuses
flags this launcher takes (`--policy kv_aware`, `--kv-event-source`), so running the launcher
for it would pass tests that the image fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["IMAGE_TABLE", "ImageRule", "UnknownImageError", "local_argv", "repository"]

Container = dict[str, Any]
Launcher = Callable[[Container, str], list[str]]


class UnknownImageError(ValueError):
    """The image has no local stand-in: the pod's container cannot start."""


class ImageRule(BaseModel):
    """Images whose repository's last path segment is `name` run with `launcher`."""

    name: str
    launcher: str
    description: str


IMAGE_TABLE: tuple[ImageRule, ...] = (
    ImageRule(
        name="vllm-openai",
        launcher="vllm",
        description="vLLM's OpenAI server -> `kvbench sim` with the same serve flags",
    ),
    ImageRule(
        name="kvbench",
        launcher="project",
        description="the project's image -> the container's command, default `kvbench`",
    ),
    ImageRule(
        name="kvbench-router",
        launcher="router-image",
        description="the project's router image -> the container's command, default "
        "`vllm-router` (the wheel's launcher), with its args as they are",
    ),
)


def repository(image: str) -> str:
    """`registry/owner/name:tag@digest` -> `registry/owner/name`."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image = image[: len(image) - len(last)] + last.split(":", 1)[0]
    return image


def executable(name: str) -> str:
    """`name` from this Python's environment first (the venv), then from PATH."""
    if name in ("python", "python3"):
        return sys.executable
    if os.sep in name:
        return name
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise UnknownImageError(f"{name!r} is not installed (not in {local.parent} nor on PATH)")
    return found


def _with_host(args: Sequence[str], host: str) -> list[str]:
    """`args` with any `--host` replaced by the pod's own address."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--host":
            skip = True
        elif not arg.startswith("--host="):
            out.append(arg)
    return [*out, "--host", host]


_VLLM_PREFIXES = (
    ["vllm", "serve"],
    ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    ["python", "-m", "vllm.entrypoints.openai.api_server"],
)


_KV_EVENTS_FLAG = "--kv-events-config"


def _kv_events_on_pod_address(args: Sequence[str], pod_ip: str) -> list[str]:
    """`args` with a KV-event publisher that binds every address (`tcp://*:PORT`) bound to the
    pod's address instead: in a pod, every address is the pod's; here every pod shares the
    machine's, and two workers on one port would collide. `[::ffff:IP]`, IPv4-mapped, which
    ZMQ binds as IP, keeps it an endpoint vLLM's publisher binds (`::` in it), not connects."""

    def narrowed(value: str) -> str:
        config = json.loads(value)
        endpoint = config.get("endpoint", "")
        if not endpoint.startswith("tcp://*:"):
            return value
        config["endpoint"] = endpoint.replace("*", f"[::ffff:{pod_ip}]", 1)
        return json.dumps(config)

    out: list[str] = []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == _KV_EVENTS_FLAG:
            out.append(narrowed(arg))
        elif arg.startswith(f"{_KV_EVENTS_FLAG}="):
            out.append(f"{_KV_EVENTS_FLAG}={narrowed(arg.split('=', 1)[1])}")
        else:
            out.append(arg)
    return out


def _vllm(container: Container, pod_ip: str) -> list[str]:
    args = [*container.get("command", []), *container.get("args", [])]
    for prefix in _VLLM_PREFIXES:
        if args[: len(prefix)] == prefix:
            args = args[len(prefix) :]
            break
    if args and not args[0].startswith("-"):
        args = ["--model", *args]  # `vllm serve MODEL`'s positional model
    # `python -m kvbench.sim` is `kvbench sim` without importing the rest of the CLI.
    args = _kv_events_on_pod_address(args, pod_ip)
    return [sys.executable, "-m", "kvbench.sim", *_with_host(args, pod_ip)]


def _project(container: Container, pod_ip: str) -> list[str]:
    command = container.get("command") or ["kvbench"]
    args = _kv_events_on_pod_address(container.get("args", []), pod_ip)
    return [executable(command[0]), *command[1:], *args]


def _router_image(container: Container, pod_ip: str) -> list[str]:
    command = container.get("command") or ["vllm-router"]
    return [executable(command[0]), *command[1:], *container.get("args", [])]


_LAUNCHERS: dict[str, Launcher] = {
    "vllm": _vllm,
    "project": _project,
    "router-image": _router_image,
}


def local_argv(container: Container, pod_ip: str) -> list[str]:
    """The argv that runs `container` (command and args already $(VAR)-expanded)."""
    image = container.get("image", "")
    name = repository(image).rsplit("/", 1)[-1]
    for rule in IMAGE_TABLE:
        if rule.name == name:
            return _LAUNCHERS[rule.launcher](container, pod_ip)
    known = ", ".join(rule.name for rule in IMAGE_TABLE)
    raise UnknownImageError(
        f"image {image!r} has no local stand-in in kvbench.testing.images.IMAGE_TABLE "
        f"(known repositories: {known})"
    )
