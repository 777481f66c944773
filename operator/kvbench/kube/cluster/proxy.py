"""What a Service arm's balancing was: kube-proxy's mode, read where kubeadm and most
installers keep kube-proxy's configuration (ConfigMap kube-system/kube-proxy, `config.conf`).

iptables and nftables pick a random endpoint per connection, IPVS a round robin (its default
scheduler): the Service arm's hit rate depends on which. Reading it never fails a run: where
it cannot be read (refused, absent, malformed) the mode is `unknown`, with the reason.
"""

from typing import Any

import yaml
from kubernetes.client.rest import ApiException

from kvbench.api import ServiceBalancing
from kvbench.kube.cluster.api import KubeApi
from kvbench.runner.failures import ApiUnavailable, Forbidden

__all__ = ["PROXY_CONFIGMAP", "balancing_from_config", "read_balancing"]

PROXY_CONFIGMAP = ("kube-system", "kube-proxy")
"""(namespace, name) of kube-proxy's configuration; the chart's Role allows `get` on it."""
_KEY = "config.conf"
_WHERE = f"ConfigMap {PROXY_CONFIGMAP[0]}/{PROXY_CONFIGMAP[1]}"


def _unknown(why: str) -> ServiceBalancing:
    return ServiceBalancing(mode="unknown", source=f"{_WHERE}: {why}")


def balancing_from_config(text: str) -> ServiceBalancing:
    """The mode of a KubeProxyConfiguration (unset: iptables, the Linux default) and, for
    IPVS, its scheduler (unset: rr)."""
    try:
        config: Any = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return _unknown(f"{_KEY} is not YAML ({err.__class__.__name__})")
    if not isinstance(config, dict):
        return _unknown(f"{_KEY} is not a KubeProxyConfiguration")
    mode = str(config.get("mode") or "")
    source = f"{_WHERE}, {_KEY}"
    if not mode:
        return ServiceBalancing(mode="iptables", source=f"{source} (mode unset: Linux's default)")
    ipvs = config.get("ipvs")
    scheduler = str((ipvs if isinstance(ipvs, dict) else {}).get("scheduler") or "rr")
    return ServiceBalancing(
        mode=mode, scheduler=scheduler if mode == "ipvs" else None, source=source
    )


async def read_balancing(api: KubeApi) -> ServiceBalancing:
    """kube-proxy's mode on this cluster now, or `unknown` and why."""
    namespace, name = PROXY_CONFIGMAP
    try:
        found = await api.call(api.core.read_namespaced_config_map, name, namespace)
    except Forbidden:
        return _unknown("not readable by the operator (403; the chart's Role allows it)")
    except ApiException as err:
        if err.status == 404:
            return _unknown("absent (404: kube-proxy configured otherwise, or replaced)")
        return _unknown(f"{err.status} {err.reason}")
    except ApiUnavailable as err:
        return _unknown(str(err))
    text = (found.data or {}).get(_KEY)
    if text is None:
        return _unknown(f"no {_KEY} key")
    return balancing_from_config(text)
