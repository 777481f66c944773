"""Create-or-update, list and delete of the few kinds the back end makes, by label.

The typed `kubernetes` client is synchronous; callers run these in a thread. Creation is
idempotent (an existing object is patched to the wanted form), so a resumed runner that
repeats a step never makes a second object.
"""

import json
from collections.abc import Callable
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

__all__ = ["KubeObjects", "selector_string", "status_reason"]

Manifest = dict[str, Any]

_DELETABLE = ("Job", "Deployment", "StatefulSet", "Service", "ConfigMap", "RoleBinding", "Role",
              "ServiceAccount")  # fmt: skip


def selector_string(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def status_reason(err: ApiException) -> str | None:
    """The `reason` of the Status an API error carries (AlreadyExists, Conflict, ...)."""
    try:
        return json.loads(err.body or "{}").get("reason")
    except (ValueError, AttributeError):
        return None


class KubeObjects:
    """The typed APIs of one client, addressed by kind."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.batch = kubernetes.client.BatchV1Api(client)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(client)

    def _calls(self, kind: str) -> tuple[Callable[..., Any], ...]:
        """(create, patch, delete, list) of `kind`, all namespaced."""
        table = {
            "Service": (self.core, "service"),
            "ConfigMap": (self.core, "config_map"),
            "ServiceAccount": (self.core, "service_account"),
            "StatefulSet": (self.apps, "stateful_set"),
            "Deployment": (self.apps, "deployment"),
            "Job": (self.batch, "job"),
            "Role": (self.rbac, "role"),
            "RoleBinding": (self.rbac, "role_binding"),
        }
        api, noun = table[kind]
        return (
            getattr(api, f"create_namespaced_{noun}"),
            getattr(api, f"patch_namespaced_{noun}"),
            getattr(api, f"delete_namespaced_{noun}"),
            getattr(api, f"list_namespaced_{noun}"),
        )

    def apply(self, manifest: Manifest) -> None:
        """Create `manifest`, or patch the existing object of that name to match it."""
        create, patch, _, _ = self._calls(manifest["kind"])
        namespace = manifest["metadata"]["namespace"]
        try:
            create(namespace, manifest)
        except ApiException as err:
            if err.status != 409 or status_reason(err) != "AlreadyExists":
                raise  # a 409 Conflict from a busy API server is a passing refusal: retried
            if manifest["kind"] == "Job":
                return  # a Job's template is immutable: the existing one is the one
            patch(manifest["metadata"]["name"], namespace, manifest)

    def delete(self, kind: str, name: str, namespace: str) -> None:
        """Delete one object with its dependents; gone already is fine."""
        _, _, delete, _ = self._calls(kind)
        body = kubernetes.client.V1DeleteOptions(propagation_policy="Background")
        try:
            delete(name, namespace, body=body, _preload_content=False)
        except ApiException as err:
            if err.status != 404:
                raise

    def endpoint_slice_addresses(self, namespace: str, service: str) -> set[str]:
        """Ready addresses of a Service, from its EndpointSlices (what kube-proxy reads;
        `discovery.k8s.io/v1` since Kubernetes 1.21, `v1beta1` before)."""
        for version in ("v1", "v1beta1"):
            path = f"/apis/discovery.k8s.io/{version}/namespaces/{namespace}/endpointslices"
            method, url, headers, body, _ = self.core.api_client.param_serialize(
                "GET",
                path,
                query_params=[("labelSelector", f"kubernetes.io/service-name={service}")],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.core.api_client.call_api(method, url, headers, body)
            response.read()
            if response.status == 404:
                continue
            if response.status >= 400:
                raise ApiException(status=response.status, reason=response.reason)
            slices = json.loads(response.data)["items"]
            return {
                address
                for endpoint_slice in slices
                for endpoint in endpoint_slice.get("endpoints") or []
                if (endpoint.get("conditions") or {}).get("ready") is not False
                for address in endpoint.get("addresses") or []
            }
        return set()

    def names(self, kind: str, namespace: str, labels: dict[str, str]) -> list[str]:
        _, _, _, list_ = self._calls(kind)
        items = list_(namespace, label_selector=selector_string(labels)).items
        return [item.metadata.name for item in items]

    def delete_labelled(
        self,
        namespace: str,
        labels: dict[str, str],
        kinds: tuple[str, ...] = _DELETABLE,
        keep: Callable[[str, str], bool] | None = None,
    ) -> None:
        """Delete every object of `kinds` carrying `labels`, except those `keep(kind, name)`
        spares."""
        for kind in kinds:
            for name in self.names(kind, namespace, labels):
                if keep is None or not keep(kind, name):
                    self.delete(kind, name, namespace)
