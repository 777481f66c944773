"""kopf's last-handled configuration, kept as digests.

kopf stores the resource's essence (its spec, labels and annotations) in an annotation to
tell later what changed. All annotations of an object share 256 KiB, so a spec that the API
server stores (up to ~1.5 MB) would make every patch kopf sends refused, also the one removing
its finalizer: the experiment could never be deleted and its namespace would hang in
Terminating. The only handler that reads the difference (`on.update` of `spec`) needs to know
that the spec changed, not how, so a digest of each part of the essence is enough.
"""

import hashlib
import json
from typing import Any

import kopf

__all__ = ["DigestDiffBaseStorage"]


def _digests(essence: Any) -> Any:
    """Each top-level part of `essence` as `{"sha256": ...}` (already digested ones as they
    are, so essences stored in full by an earlier operator compare equal)."""
    if not isinstance(essence, dict):
        return essence
    out = {}
    for key, part in essence.items():
        if isinstance(part, dict) and set(part) == {"sha256"}:
            out[key] = part
        else:
            text = json.dumps(part, sort_keys=True, separators=(",", ":"))
            out[key] = {"sha256": hashlib.sha256(text.encode()).hexdigest()}
    return out


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation storage of the essence, holding digests instead of the essence."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return _digests(super().build(body=body, extra_fields=extra_fields))

    def fetch(self, *, body: kopf.Body) -> Any:
        return _digests(super().fetch(body=body))
