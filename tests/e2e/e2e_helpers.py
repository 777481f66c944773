"""What the end-to-end tests share: experiment documents, kubectl apply, waiting on phase."""

import json
import time
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.testing.cluster import TestCluster

ROOT = Path(__file__).resolve().parents[2]


def experiment_document(example: str, name: str, **spec: Any) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "examples" / example).read_text())
    document["metadata"]["name"] = name
    document["spec"].update(spec)
    return document


def apply(cluster: TestCluster, namespace: str, document: dict[str, Any]) -> None:
    path = Path(cluster.workdir) / f"{namespace}-{document['metadata']['name']}.json"
    path.write_text(json.dumps(document))
    applied = cluster.kubectl("apply", "--validate=false", "-n", namespace, "-f", str(path))
    assert applied.returncode == 0, applied.stderr


def get(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any]:
    return kubernetes.client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


def wait_phase(
    cluster: TestCluster, namespace: str, name: str, phases: set[str], timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = get(cluster, namespace, name)
        if (body.get("status") or {}).get("phase") in phases:
            return body
        assert time.monotonic() < deadline, f"{name} never reached {phases}: {body.get('status')}"
        time.sleep(1)
