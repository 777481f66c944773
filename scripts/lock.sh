#!/usr/bin/env bash
# Regenerate requirements.lock, the image's Python dependencies: pyproject.toml's
# [project.dependencies] and build-system requirements, every transitive one pinned, with the
# hashes of all of each release's files (so the lock serves any platform the image is built
# for). Resolved by pip-tools under Debian 12's Python 3.11, the image's own, from PyPI alone:
# this machine's pip configuration (extra indexes, local wheels, constraints) is ignored.
# Extra arguments go to pip-compile, e.g. `scripts/lock.sh --upgrade-package rich`.
set -euo pipefail

PIP_TOOLS_VERSION=7.6.2
PYTHON=${PYTHON:-python3.11}
repo=$(cd "$(dirname "$0")/.." && pwd)
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT

unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL PIP_CONSTRAINT
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
export CUSTOM_COMPILE_COMMAND=scripts/lock.sh

"$PYTHON" -m venv "$tools/venv"
"$tools/venv/bin/pip" install --quiet "pip-tools==$PIP_TOOLS_VERSION"
cd "$repo"
"$tools/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --build-deps-for wheel --index-url https://pypi.org/simple --no-emit-index-url \
    --cache-dir "$tools/cache" --output-file requirements.lock "$@" pyproject.toml
