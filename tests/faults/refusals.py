"""An API server that refuses writes for a while: a validating admission webhook (served here,
with a certificate of the test cluster's CA) that denies every write in one namespace with
503 or 409 while it is switched on, as an overloaded or conflicting API server answers."""

import base64
import itertools
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes

from kvbench.testing.cluster import TestCluster

__all__ = ["RefusingWebhook"]

_LABEL = "kvbench.io/faults"
_RESOURCES = [
    "pods", "services", "configmaps", "serviceaccounts", "events",
    "statefulsets", "deployments", "jobs", "roles", "rolebindings",
    "benchmarkexperiments", "benchmarkexperiments/status",
]  # fmt: skip


class RefusingWebhook:
    """Switch `refusing` on and off; `refused` counts the writes it turned down, by code."""

    def __init__(self, cluster: TestCluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.refusing = False
        self.refused: dict[int, int] = {503: 0, 409: 0}
        self._codes = itertools.cycle((503, 409))
        self._lock = threading.Lock()

    def _answer(self, review: dict[str, Any]) -> dict[str, Any]:
        request = review["request"]
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        with self._lock:
            if self.refusing:
                code = next(self._codes)
                self.refused[code] += 1
                reason = "ServiceUnavailable" if code == 503 else "Conflict"
                response = {
                    "uid": request["uid"],
                    "allowed": False,
                    "status": {"code": code, "reason": reason,
                               "message": f"fault campaign: writes refused ({code})"},
                }  # fmt: skip
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": response}  # fmt: skip

    @contextmanager
    def installed(self) -> Iterator["RefusingWebhook"]:
        """Serve the webhook and register it for the namespace; remove both afterwards."""
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = json.dumps(hook._answer(json.loads(body))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        pki = self.cluster.control_plane.pki  # type: ignore[union-attr]
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.kubelet_cert, pki.kubelet_key)  # SAN: localhost
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        client = self.cluster.api_client()
        core = kubernetes.client.CoreV1Api(client)
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        core.patch_namespace(self.namespace, {"metadata": {"labels": {_LABEL: "refuse-writes"}}})
        name = f"kvbench-faults-{self.namespace}"
        admission.create_validating_webhook_configuration(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": "refuse-writes.faults.kvbench.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Ignore",
                        "timeoutSeconds": 5,
                        "namespaceSelector": {"matchLabels": {_LABEL: "refuse-writes"}},
                        "rules": [
                            {
                                "apiGroups": [
                                    "",
                                    "apps",
                                    "batch",
                                    "rbac.authorization.k8s.io",
                                    "kvbench.io",
                                ],
                                "apiVersions": ["*"],
                                "operations": ["CREATE", "UPDATE", "DELETE"],
                                "resources": _RESOURCES,
                                "scope": "Namespaced",
                            }
                        ],
                        "clientConfig": {
                            "url": f"https://localhost:{server.server_address[1]}/refuse",
                            "caBundle": base64.b64encode(pki.ca_cert.read_bytes()).decode(),
                        },
                    }
                ],
            }
        )
        try:
            yield self
        finally:
            self.refusing = False
            admission.delete_validating_webhook_configuration(name)
            server.shutdown()
