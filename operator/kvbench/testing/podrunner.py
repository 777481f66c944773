"""One pod bound to a node: its IP, volumes, init and main containers, and status.

The runner reports status the way the kubelet does (phase, conditions,
containerStatuses), so the Job, StatefulSet and EndpointSlice controllers react
as they would on a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvbench.testing.container import ContainerRunner, LaunchSpec, now_rfc3339
from kvbench.testing.events import EventRecorder
from kvbench.testing.kubeapi import KubeApi, KubeApiError
from kvbench.testing.podenv import Fetch, resolve_env
from kvbench.testing.volumes import Mount, MountPoints, materialize_volumes, mounts_for

__all__ = ["AgentContext", "PodRunner", "pod_directory"]

Obj = dict[str, Any]
log = logging.getLogger(__name__)
_HOSTS = Path("/etc/hosts")


@dataclass
class AgentContext:
    """What the node agent lends every pod: API access, shared mount points, names."""

    api: KubeApi
    fetch: Fetch
    mount_points: MountPoints
    hosts: Callable[[Obj, str], str]
    """hosts(pod, pod_ip): the pod's /etc/hosts as the cluster stands now."""
    events: EventRecorder


class PodRunner:
    """Runs one pod until it finishes or is deleted; `task` is its lifetime."""

    def __init__(
        self,
        pod: Obj,
        pod_ip: str,
        host_ip: str,
        directory: Path,
        agent: AgentContext,
        base_env: dict[str, str],
        release_ip: Callable[[], None],
    ) -> None:
        self.pod = pod
        self.uid: str = pod["metadata"]["uid"]
        self.ip = pod_ip
        self.host_ip = host_ip
        self.dir = directory
        self.agent = agent
        self.api = agent.api
        self.fetch = agent.fetch
        self.mount_points = agent.mount_points
        self.base_env = base_env
        self.release_ip = release_ip
        spec = pod["spec"]
        policy = spec.get("restartPolicy", "Always")
        prefix = f"kvbench://{self.uid}"

        def runner(container: Obj, restart: str) -> ContainerRunner:
            def record(kind: str, reason: str, message: str) -> None:
                agent.events.record(self.pod, container["name"], kind, reason, message)

            return ContainerRunner(
                container, pod_ip, directory / "logs", lambda: self._prepare(container),
                self._changed, restart, prefix, record,
            )  # fmt: skip

        init_policy = "Never" if policy == "Never" else "OnFailure"
        self.init = [runner(c, init_policy) for c in spec.get("initContainers", [])]
        self.main = [runner(c, policy) for c in spec.get("containers", [])]
        self.phase = "Pending"
        self.initialized = not self.init
        self.start_time = now_rfc3339()
        self.volumes: dict[str, Path] | None = None
        self.acquired: list[Any] = []
        self._dirty = asyncio.Event()
        self._transitions: dict[str, tuple[str, str]] = {}
        self.stopped = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def path(self) -> str:
        meta = self.pod["metadata"]
        return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"

    def container(self, name: str) -> ContainerRunner | None:
        return next((c for c in [*self.init, *self.main] if c.name == name), None)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.path}")

    def _changed(self) -> None:
        self._dirty.set()

    async def _prepare(self, container: Obj) -> LaunchSpec:
        if self.volumes is None:
            self.volumes = await materialize_volumes(self.pod, self.dir / "volumes", self.fetch)
        env = await resolve_env(container, self.pod_with_ips(), self.fetch, self.base_env)
        mounts = mounts_for(container, self.volumes)
        if all(mount.target != _HOSTS for mount in mounts):
            self.write_hosts()
            mounts.append(Mount(source=self.dir / "hosts", target=_HOSTS))
        for mount in mounts:
            if mount not in self.acquired:
                self.mount_points.acquire(mount)
                self.acquired.append(mount)
        return LaunchSpec(env=env, mounts=mounts, workdir=self.dir / "work")

    def write_hosts(self) -> None:
        """(Re)write the pod's hosts file in place: bind mounts of it see the change."""
        path = self.dir / "hosts"
        text = self.agent.hosts(self.pod, self.ip)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as hosts:  # truncates: same inode
                hosts.write(text)

    def pod_with_ips(self) -> Obj:
        status = {**self.pod.get("status", {}), **self._ip_status()}
        return {**self.pod, "status": status}

    def _ip_status(self) -> Obj:
        return {"hostIP": self.host_ip, "podIP": self.ip, "podIPs": [{"ip": self.ip}]}

    async def _run(self) -> None:
        writer = asyncio.create_task(self._status_writer())
        try:
            self._changed()
            for runner in self.init:
                code = await runner.run()
                if runner.stopping:
                    return
                if code != 0:
                    self.phase = "Failed"
                    return
            self.initialized = True
            self._changed()
            codes = await asyncio.gather(*(runner.run() for runner in self.main))
            if not any(r.stopping for r in self.main):
                self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        except Exception:
            log.exception("pod %s failed", self.path)
            self.phase = "Failed"
        finally:
            self._finish()
            await self._flush(writer)
            self.stopped.set()

    def _finish(self) -> None:
        for mount in self.acquired:
            self.mount_points.release(mount)
        self.acquired.clear()
        self.release_ip()

    async def _flush(self, writer: asyncio.Task[None]) -> None:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        with contextlib.suppress(KubeApiError, OSError, httpx.HTTPError):
            await self._write_status()

    async def stop(self, grace: float) -> None:
        """Kill every container (SIGTERM, then SIGKILL after `grace`) and wait for the end."""
        await asyncio.gather(*(c.stop(grace) for c in [*self.init, *self.main]))
        if self.task is not None:
            await self.stopped.wait()

    def remove_files(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _current_phase(self) -> str:
        if self.phase in ("Succeeded", "Failed"):
            return self.phase
        if self.initialized and any(c.has_run for c in self.main):
            return "Running"
        return "Pending"

    def _condition(self, kind: str, ok: bool, reason: str = "") -> Obj:
        status = "True" if ok else "False"
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            self._transitions[kind] = (status, now_rfc3339())
        condition = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": self._transitions[kind][1],
        }
        return {**condition, "reason": reason} if reason else condition

    def status(self) -> Obj:
        phase = self._current_phase()
        done = phase in ("Succeeded", "Failed")
        ready = not done and self.initialized and all(c.status()["ready"] for c in self.main)
        reason = "PodCompleted" if done else ("" if ready else "ContainersNotReady")
        return {
            "phase": phase,
            **self._ip_status(),
            "startTime": self.start_time,
            "conditions": [
                self._condition("Initialized", self.initialized or done),
                self._condition("ContainersReady", ready, reason),
                self._condition("Ready", ready, reason),
            ],
            "initContainerStatuses": [c.status() for c in self.init],
            "containerStatuses": [c.status() for c in self.main],
            "qosClass": self.pod.get("status", {}).get("qosClass", "BestEffort"),
        }

    async def _write_status(self) -> None:
        await self.api.patch(
            f"{self.path}/status", {"metadata": {"uid": self.uid}, "status": self.status()}
        )

    async def _status_writer(self) -> None:
        """Coalesce changes into status patches; retry what fails."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._write_status()
            except KubeApiError as err:
                if err.status == 404:
                    return
                log.warning("status of %s: %s", self.path, err)
                self._dirty.set()
                await asyncio.sleep(1.0)
            except (OSError, httpx.HTTPError) as err:
                log.warning("status of %s: %s", self.path, err)
                self._dirty.set()
                await asyncio.sleep(1.0)


def pod_directory(root: Path, pod: Obj) -> Path:
    meta = pod["metadata"]
    return root / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
