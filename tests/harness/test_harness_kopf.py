"""kopf, the operator's framework, runs against the test cluster: CRD, watch, status patch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes

from kvbench.testing.cluster import TestCluster
from kvbench.testing.wait import wait_for

OPERATOR = Path(__file__).with_name("kopf_widget.py")
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.harness.kvbench.io"},
    "spec": {
        "group": "harness.kvbench.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


def test_a_kopf_operator_reacts_to_a_custom_resource(
    cluster: TestCluster, namespace: str, tmp_path: Path
) -> None:
    client = cluster.api_client()
    kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(CRD)
    custom = kubernetes.client.CustomObjectsApi(client)
    wait_for(
        lambda: custom.list_namespaced_custom_object(
            "harness.kvbench.io", "v1", namespace, "widgets"
        ),
        30,
        "the Widget API to be served",
    )
    log = tmp_path / "kopf.log"
    with log.open("w") as sink:
        operator = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "-n", namespace, str(OPERATOR)],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        custom.create_namespaced_custom_object(
            "harness.kvbench.io", "v1", namespace, "widgets",
            {"apiVersion": "harness.kvbench.io/v1", "kind": "Widget",
             "metadata": {"name": "w"}, "spec": {"size": 21}},
        )  # fmt: skip

        def seen() -> int | None:
            widget = custom.get_namespaced_custom_object(
                "harness.kvbench.io", "v1", namespace, "widgets", "w"
            )
            return widget.get("status", {}).get("seen")

        try:
            assert wait_for(seen, 60, "kopf's status patch") == 42
        except TimeoutError as err:
            raise AssertionError(f"{err}\nkopf's log:\n{log.read_text()}") from err
        # Deleted while kopf runs, so that it can remove its finalizer.
        custom.delete_namespaced_custom_object(
            "harness.kvbench.io", "v1", namespace, "widgets", "w"
        )
        wait_for(
            lambda: (
                not custom.list_namespaced_custom_object(
                    "harness.kvbench.io", "v1", namespace, "widgets"
                )["items"]
            ),
            60,
            "the Widget to be gone",
        )
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(operator.pid, signal.SIGKILL)
            operator.wait()
        kubernetes.client.ApiextensionsV1Api(client).delete_custom_resource_definition(
            CRD["metadata"]["name"]
        )
