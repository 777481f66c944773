"""Where recorded results are read from: a results directory, or `bx/NAME` on the cluster
(the experiment's ConfigMaps, through the current kubeconfig context)."""

from pathlib import Path

import click

from kvbench.api import GROUP, PLURAL, SHORT_NAME, VERSION
from kvbench.runner import DirectoryStore, RunStore, StoreMismatch

__all__ = ["open_results"]

_PREFIXES = (f"{SHORT_NAME}/", "benchmarkexperiment/", f"{PLURAL}/", f"{PLURAL}.{GROUP}/")


def _cluster_store(name: str, namespace: str | None) -> RunStore:
    import kubernetes
    from kubernetes.client.rest import ApiException

    from kvbench.kube.store import ConfigMapStore

    try:
        kubernetes.config.load_kube_config()
        _, context = kubernetes.config.list_kube_config_contexts()
        namespace = namespace or context["context"].get("namespace") or "default"
    except (kubernetes.config.ConfigException, FileNotFoundError):
        kubernetes.config.load_incluster_config()
        namespace = namespace or "default"
    client = kubernetes.client.ApiClient()
    try:
        body = kubernetes.client.CustomObjectsApi(client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
    except ApiException as err:
        raise click.ClickException(f"{SHORT_NAME}/{name} in {namespace}: {err.reason}") from None
    uid = body["metadata"]["uid"]
    store = ConfigMapStore(kubernetes.client.CoreV1Api(client), namespace, name, uid, {})
    store.load()
    if store.stored_experiment() is None:
        raise click.ClickException(f"{SHORT_NAME}/{name} in {namespace} has no results yet")
    return store


def open_results(source: str, namespace: str | None = None) -> RunStore:
    """The store behind `source`: `bx/NAME` (the cluster) or a results directory."""
    for prefix in _PREFIXES:
        if source.startswith(prefix):
            return _cluster_store(source.removeprefix(prefix), namespace)
    store = DirectoryStore(Path(source))
    if not store.is_results_directory():
        raise click.ClickException(f"{source}: not a kvbench results directory nor bx/NAME")
    try:
        store.load()
    except StoreMismatch as err:
        raise click.ClickException(str(err)) from None
    return store
