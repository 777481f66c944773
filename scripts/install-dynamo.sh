#!/usr/bin/env bash
# Install NVIDIA Dynamo 1.6.1 (PyPI ai-dynamo + ai-dynamo-runtime) into a kvbench venv.
#
# usage: scripts/install-dynamo.sh [VENV]     (default: .venv at the repository root)
#
# `pip install ai-dynamo==1.6.1` cannot work here: it requires aisimulate==0.13.0, a
# stub package whose install downloads the real code from an index this machine (and
# CI) cannot reach, and ai-dynamo-runtime caps pydantic (<=2.13.5) and ai-dynamo caps
# kubernetes (<33) below kvbench's own pins. kvbench only runs `dynamo.frontend` and
# `dynamo.mocker` (no AIS perf model, file discovery, never the Kubernetes backend), so:
#   1. install kvbench's `dynamo` extra: ai-dynamo's other requirements, pinned;
#   2. install ai-dynamo and ai-dynamo-runtime 1.6.1 with --no-deps;
#   3. check every requirement in their wheel metadata against the venv, allowing only
#      the documented exceptions below, and that both entry points start.
# Idempotent: a venv that already passes step 3 is left as it is.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
PY="$VENV/bin/python"
DYNAMO_VERSION="1.6.1"

if [[ ! -x "$PY" ]]; then
    echo "install-dynamo: no python at $PY (create the venv first)" >&2
    exit 2
fi

# Requirements of ai-dynamo / ai-dynamo-runtime this venv deliberately does not meet,
# with the reason; anything else unmet fails the install.
check_installed() {
    "$PY" - "$DYNAMO_VERSION" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, requires, version

from packaging.requirements import Requirement

WANTED = sys.argv[1]
TOLERATED = {
    "aisimulate": "stub that downloads from an unreachable index; only the AIS perf model uses it",
    "pydantic": "kvbench pins a newer pydantic than ai-dynamo-runtime's <=2.13.5 cap",
    "kubernetes": "kvbench pins a newer client; Dynamo uses it only for Kubernetes discovery",
}
problems = []
for dist in ("ai-dynamo", "ai-dynamo-runtime"):
    try:
        found = version(dist)
    except PackageNotFoundError:
        print(f"install-dynamo: {dist} is not installed")
        sys.exit(1)
    if found != WANTED:
        print(f"install-dynamo: {dist} {found} installed, want {WANTED}")
        sys.exit(1)
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = version(req.name)
        except PackageNotFoundError:
            have = None
        if have is not None and req.specifier.contains(have, prereleases=True):
            continue
        note = f"{dist} requires {req}, venv has {have or 'nothing'}"
        if req.name in TOLERATED:
            print(f"install-dynamo: accepted: {note} ({TOLERATED[req.name]})")
        else:
            problems.append(note)
for note in problems:
    print(f"install-dynamo: unmet: {note}")
sys.exit(1 if problems else 0)
EOF
}

smoke() {
    "$PY" -m dynamo.frontend --help >/dev/null
    "$PY" -m dynamo.mocker --help >/dev/null
}

if check_installed >/dev/null 2>&1 && smoke 2>/dev/null; then
    echo "install-dynamo: ai-dynamo $DYNAMO_VERSION already installed in $VENV"
    exit 0
fi

"$VENV/bin/pip" install --quiet -e "${ROOT}[dynamo]"
"$VENV/bin/pip" install --quiet --no-deps \
    "ai-dynamo-runtime==$DYNAMO_VERSION" "ai-dynamo==$DYNAMO_VERSION"
check_installed
smoke
echo "install-dynamo: ai-dynamo $DYNAMO_VERSION installed in $VENV"
