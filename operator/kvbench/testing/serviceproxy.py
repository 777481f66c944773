"""The service proxy: a stand-in for kube-proxy in iptables mode.

For every TCP port of every Service with a ClusterIP it listens on
ClusterIP:port and sends each new connection to a random ready endpoint, read
from the EndpointSlices at that moment (legacy Endpoints refuse loopback
addresses; EndpointSlices carry them). Run it as
`python -m kvbench.testing.serviceproxy CONFIG.json`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from kvbench.netbalance import Backend, TcpBalancer
from kvbench.testing.config import AgentConfig
from kvbench.testing.kubeapi import KubeApi, Reflector

__all__ = ["ServiceProxy", "main"]

Obj = dict[str, Any]
log = logging.getLogger("kvbench.testing.serviceproxy")
_SLICES = "/apis/discovery.k8s.io/v1beta1/endpointslices"
_SERVICE_LABEL = "kubernetes.io/service-name"


def ready_backends(slices: list[Obj], port_name: str) -> list[Backend]:
    """Addresses and ports of the ready endpoints of one Service port."""
    backends: list[Backend] = []
    for endpoint_slice in slices:
        ports = [p for p in endpoint_slice.get("ports") or [] if p.get("name", "") == port_name]
        for endpoint in endpoint_slice.get("endpoints") or []:
            if endpoint.get("conditions", {}).get("ready") is False:
                continue
            for port in ports:
                if port.get("protocol", "TCP") != "TCP" or port.get("port") is None:
                    continue
                backends.extend((address, int(port["port"])) for address in endpoint["addresses"])
    return backends


class ServiceProxy:
    """Keeps one balancer per Service port in step with the API."""

    def __init__(self, api: KubeApi, apiserver: Backend) -> None:
        self.api = api
        self.apiserver = apiserver
        self.balancers: dict[tuple[str, int], TcpBalancer] = {}
        self._lock = asyncio.Lock()  # both reflectors reconcile: one at a time
        self.services = Reflector(api, "/api/v1/services", self._changed)
        self.slices = Reflector(api, _SLICES, self._changed)

    def backends_of(self, namespace: str, service: str, port_name: str) -> list[Backend]:
        if (namespace, service) == ("default", "kubernetes"):
            return [self.apiserver]  # the apiserver runs with no endpoint reconciler
        slices = [
            s for s in self.slices.objects.values()
            if s["metadata"]["namespace"] == namespace
            and s["metadata"].get("labels", {}).get(_SERVICE_LABEL) == service
        ]  # fmt: skip
        return ready_backends(slices, port_name)

    def _wanted(self) -> dict[tuple[str, int], tuple[str, str, str]]:
        wanted = {}
        for service in self.services.objects.values():
            spec, meta = service["spec"], service["metadata"]
            cluster_ip = spec.get("clusterIP")
            if not cluster_ip or cluster_ip == "None" or spec.get("type") == "ExternalName":
                continue
            for port in spec.get("ports", []):
                if port.get("protocol", "TCP") == "TCP":
                    wanted[(cluster_ip, int(port["port"]))] = (
                        meta["namespace"], meta["name"], port.get("name", ""),
                    )  # fmt: skip
        return wanted

    async def _changed(self, _event: str, _obj: Obj) -> None:
        async with self._lock:
            await self._reconcile()

    async def _reconcile(self) -> None:
        wanted = self._wanted()
        for key in [k for k in self.balancers if k not in wanted]:
            await self.balancers.pop(key).close()
            log.info("stopped listening on %s:%s", *key)
        for key, (namespace, name, port_name) in wanted.items():
            if key in self.balancers:
                continue
            balancer = TcpBalancer(
                key[0], key[1], functools.partial(self.backends_of, namespace, name, port_name)
            )
            try:
                await balancer.start()
            except OSError as err:
                log.error("cannot listen on %s:%s for %s/%s: %s", *key, namespace, name, err)
                continue
            self.balancers[key] = balancer
            log.info("listening on %s:%s for service %s/%s", *key, namespace, name)

    async def run(self) -> None:
        try:
            await asyncio.gather(self.services.run(), self.slices.run())
        finally:
            for balancer in self.balancers.values():
                await balancer.close()


async def _main(config: AgentConfig) -> None:
    api = KubeApi(config.access)
    proxy = ServiceProxy(api, (config.apiserver_host, config.apiserver_port))
    task = asyncio.create_task(proxy.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("service proxy stopped")
    finally:
        await api.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(_main(AgentConfig.model_validate_json(Path(sys.argv[1]).read_text())))


if __name__ == "__main__":
    main()
