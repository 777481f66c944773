"""A minimal kopf operator for the harness test: it marks each Widget as seen in its status."""

import kopf


@kopf.on.create("harness.kvbench.io", "v1", "widgets")
def seen(spec: dict, patch: kopf.Patch, **_: object) -> None:
    patch.status["seen"] = spec.get("size", 0) * 2
