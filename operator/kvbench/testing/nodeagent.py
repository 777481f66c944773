"""The node agent: a stand-in for the kubelet of every node of a test cluster.

It registers the nodes, keeps them Ready, runs each pod bound to them as local
processes on a loopback IP of its own, kills them when the pod is deleted
(honouring the grace period, then removing the pod as the kubelet does), serves
their logs through the kubelet API, keeps each pod's /etc/hosts current (cluster
names without DNS) and gives unbound claims a local directory. Run it as
`python -m kvbench.testing.nodeagent CONFIG.json`; SIGTERM stops every pod.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

from kvbench.testing.config import AgentConfig, PlacedNode
from kvbench.testing.container import ContainerRunner
from kvbench.testing.dns import hosts_file
from kvbench.testing.events import EventRecorder
from kvbench.testing.kubeapi import KubeApi, KubeApiError, Reflector
from kvbench.testing.kubeletapi import KubeletApi
from kvbench.testing.nodes import heartbeat, register_node
from kvbench.testing.podrunner import AgentContext, PodRunner, pod_directory
from kvbench.testing.storage import LocalProvisioner
from kvbench.testing.volumes import MountPoints

__all__ = ["IpPool", "NodeAgent", "main"]

Obj = dict[str, Any]
log = logging.getLogger("kvbench.testing.nodeagent")
_SHUTDOWN_GRACE = 5.0
_DELETE_ATTEMPTS = 10


class IpPool:
    """Pod IPs of one node's /24, handed out round-robin so a new pod rarely reuses one."""

    def __init__(self, cidr: str) -> None:
        self.addresses = [str(ip) for ip in ipaddress.ip_network(cidr).hosts()]
        self.used: set[str] = set()
        self._next = 0

    def allocate(self) -> str:
        for _ in range(len(self.addresses)):
            ip = self.addresses[self._next]
            self._next = (self._next + 1) % len(self.addresses)
            if ip not in self.used:
                self.used.add(ip)
                return ip
        raise RuntimeError("no pod IP left on this node")

    def release(self, ip: str) -> None:
        self.used.discard(ip)


class NodeAgent:
    """Runs every node of `config` in one asyncio loop."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.nodes: dict[str, PlacedNode] = {n.name: n for n in config.nodes}
        self.pools = {n.name: IpPool(n.pod_cidr) for n in config.nodes}
        self.runners: dict[str, PodRunner] = {}
        self.terminating: set[str] = set()
        self.api = KubeApi(config.access)
        self.context = AgentContext(
            self.api, self.fetch, MountPoints(), self.hosts_for, EventRecorder(self.api)
        )
        self.pods = Reflector(
            self.api, "/api/v1/pods", self.on_pod, fieldSelector="spec.nodeName!="
        )
        self.services = Reflector(self.api, "/api/v1/services", self.on_service)
        provisioner = LocalProvisioner(self.api, config.state_dir / "volumes")
        self.claims = Reflector(self.api, "/api/v1/persistentvolumeclaims", provisioner.on_claim)
        self._names_changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def fetch(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A namespaced object, or a cluster-scoped one when `namespace` is empty."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        try:
            return await self.api.get(f"/api/v1{scope}/{kind}/{name}")
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise

    def find_container(self, namespace: str, pod: str, container: str) -> ContainerRunner | None:
        for runner in self.runners.values():
            meta = runner.pod["metadata"]
            if (meta["namespace"], meta["name"]) == (namespace, pod):
                return runner.container(container)
        return None

    def base_env(self, pod: Obj) -> dict[str, str]:
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
        host, port = self.config.apiserver_host, str(self.config.apiserver_port)
        return {
            "PATH": path,
            "HOME": os.environ.get("HOME", "/root"),
            "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
        }

    async def run(self) -> None:
        servers = []
        for node in self.config.nodes:
            server = KubeletApi(node.ip, 0, self.config.kubelet_cert, self.config.kubelet_key,
                                self.find_container)  # fmt: skip
            await server.start()
            servers.append(server)
            await register_node(self.api, node, server.port)
            log.info(
                "node %s registered at %s, kubelet API port %s", node.name, node.ip, server.port
            )
        background = [
            asyncio.create_task(heartbeat(self.api, self.config.nodes)),
            asyncio.create_task(self.pods.run()),
            asyncio.create_task(self.services.run()),
            asyncio.create_task(self.claims.run()),
            asyncio.create_task(self._rewrite_hosts()),
        ]
        try:
            await asyncio.gather(*background)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*(r.stop(_SHUTDOWN_GRACE) for r in self.runners.values()))
            for server in servers:
                await server.close()
            await self.api.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def hosts_for(self, pod: Obj, pod_ip: str) -> str:
        return hosts_file(pod, pod_ip, self.services.objects.values(), self.pods.objects.values())

    async def on_service(self, _event: str, _service: Obj) -> None:
        self._names_changed.set()

    async def _rewrite_hosts(self) -> None:
        """Keep every running pod's /etc/hosts in step with Services and pods."""
        while True:
            await self._names_changed.wait()
            self._names_changed.clear()
            for runner in list(self.runners.values()):
                if not runner.stopped.is_set():
                    runner.write_hosts()
            await asyncio.sleep(0.1)  # coalesce bursts of changes

    async def on_pod(self, event: str, pod: Obj) -> None:
        self._names_changed.set()
        node = self.nodes.get(pod["spec"].get("nodeName", ""))
        if node is None:
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        runner = self.runners.get(uid)
        if event == "DELETED":
            if runner is not None and uid not in self.terminating:
                self.terminating.add(uid)
                self._spawn(self._terminate(runner, self._grace(pod), delete=False))
            return
        if runner is None:
            finished = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
            if meta.get("deletionTimestamp"):
                self._spawn(self._delete(pod))
            elif not finished:
                self._start(node, pod)
            return
        runner.pod = pod
        if meta.get("deletionTimestamp") and uid not in self.terminating:
            self.terminating.add(uid)
            grace = meta.get("deletionGracePeriodSeconds", self._grace(pod))
            self._spawn(self._terminate(runner, float(grace), delete=True))

    @staticmethod
    def _grace(pod: Obj) -> float:
        return float(pod["spec"].get("terminationGracePeriodSeconds", 30))

    def _start(self, node: PlacedNode, pod: Obj) -> None:
        pool = self.pools[node.name]
        ip = pool.allocate()
        runner = PodRunner(
            pod, ip, node.ip, pod_directory(self.config.state_dir / "pods", pod), self.context,
            self.base_env(pod), lambda: pool.release(ip),
        )  # fmt: skip
        self.runners[pod["metadata"]["uid"]] = runner
        log.info("pod %s/%s: starting on %s at %s", pod["metadata"]["namespace"],
                 pod["metadata"]["name"], node.name, ip)  # fmt: skip
        runner.start()

    async def _terminate(self, runner: PodRunner, grace: float, delete: bool) -> None:
        uid = runner.uid
        log.info("pod %s: stopping (grace %ss)", runner.path, grace)
        try:
            await runner.stop(grace)
            if delete:
                await self._delete(runner.pod)
        finally:
            self.runners.pop(uid, None)
            self.terminating.discard(uid)
            runner.remove_files()

    async def _delete(self, pod: Obj) -> None:
        """The kubelet's last word on a pod: delete it now that nothing of it runs."""
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        for _ in range(_DELETE_ATTEMPTS):
            try:
                await self.api.delete(path, body)
                return
            except KubeApiError as err:
                if err.status in (404, 409):  # gone already, or another pod by that name
                    return
                log.warning("deleting pod %s: %s", meta["name"], err)
            except httpx.HTTPError as err:
                log.warning("deleting pod %s: %s", meta["name"], err)
            await asyncio.sleep(1.0)


async def _main(config: AgentConfig) -> None:
    task = asyncio.create_task(NodeAgent(config).run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("node agent stopped")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = AgentConfig.model_validate_json(Path(sys.argv[1]).read_text())
    asyncio.run(_main(config))


if __name__ == "__main__":
    main()
