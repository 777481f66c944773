"""A minimal kopf operator for the harness test: it marks each Widget as seen in its status."""

from typing import Any

import kopf


@kopf.on.create("harness.kvbench.io", "v1", "widgets")
def seen(spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    patch.status["seen"] = spec.get("size", 0) * 2
