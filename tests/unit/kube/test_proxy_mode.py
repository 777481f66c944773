"""What balanced a Service arm: kube-proxy's mode from its ConfigMap, and `unknown` with the
reason, never a failed run, where that cannot be read. No API server: a fake read."""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kvbench.kube.cluster.proxy import balancing_from_config, read_balancing
from kvbench.runner.failures import Forbidden


@pytest.mark.parametrize(
    ("config", "mode", "scheduler", "policy"),
    [
        ("mode: ''\n", "iptables", None, "random per connection"),
        ("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n",
         "iptables", None, "random per connection"),
        ("mode: iptables\nipvs: {scheduler: sh}\n", "iptables", None, "random per connection"),
        ("mode: nftables\n", "nftables", None, "random per connection"),
        ("mode: ipvs\nipvs: {scheduler: ''}\n", "ipvs", "rr", "round robin per connection"),
        ("mode: ipvs\n", "ipvs", "rr", "round robin per connection"),
        ("mode: ipvs\nipvs: {scheduler: sh}\n", "ipvs", "sh", "IPVS scheduler sh per connection"),
        ("mode: kernelspace\n", "kernelspace", None, "unknown"),
    ],
)  # fmt: skip
def test_the_mode_and_what_it_balances_by(config: str, mode: str, scheduler, policy) -> None:
    balancing = balancing_from_config(config)
    assert (balancing.mode, balancing.scheduler, balancing.policy) == (mode, scheduler, policy)
    assert balancing.source.startswith("ConfigMap kube-system/kube-proxy, config.conf")


def test_an_unset_mode_says_it_is_the_default() -> None:
    assert "mode unset" in balancing_from_config("clusterCIDR: 10.0.0.0/8\n").source


@pytest.mark.parametrize("config", ["mode: [unclosed\n", "- a list\n", "just text"])
def test_a_config_that_is_not_a_kube_proxy_configuration_is_unknown(config: str) -> None:
    balancing = balancing_from_config(config)
    assert balancing.mode == "unknown" and "config.conf is not" in balancing.source


class FakeApi:
    """What `read_balancing` calls: one ConfigMap read, answered or refused."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.read: tuple[str, str] | None = None
        self.core = SimpleNamespace(read_namespaced_config_map=self._read)

    def _read(self, name: str, namespace: str) -> Any:
        self.read = (namespace, name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


def _read(answer: Any) -> Any:
    api = FakeApi(answer)
    balancing = asyncio.run(read_balancing(api))  # type: ignore[arg-type]
    assert api.read == ("kube-system", "kube-proxy")
    return balancing


def test_the_configmap_is_read_by_name() -> None:
    found = _read(SimpleNamespace(data={"config.conf": "mode: ipvs\n", "kubeconfig.conf": "x"}))
    assert (found.mode, found.scheduler) == ("ipvs", "rr")


@pytest.mark.parametrize(
    ("refusal", "words"),
    [
        (Forbidden("API server refused read_namespaced_config_map"), "403"),
        (ApiException(status=404, reason="Not Found"), "absent (404"),
        (SimpleNamespace(data={"other": "x"}), "no config.conf key"),
        (SimpleNamespace(data=None), "no config.conf key"),
    ],
)
def test_an_unreadable_mode_is_unknown_with_the_reason_never_a_failure(refusal, words) -> None:
    """The bug: a cluster that does not let the operator read kube-system (or has no
    kube-proxy) would fail every Service run."""
    found = _read(refusal)
    assert found.mode == "unknown" and found.policy == "unknown"
    assert words in found.source, found
