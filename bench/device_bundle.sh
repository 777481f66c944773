#!/bin/bash
# Build .dev/, what travels with the checkout to the lent GPU machine (Python 3.12, torch, no
# vLLM, no Kubernetes client, no network) so that `source .dev/device.sh` there gives
# `kvbench run --engine vllm`, vLLM 0.25.0 and vllm-router 0.1.17:
#   .dev/site.tar.xz     vLLM trimmed for a dense bf16 model on sm_90 (../shared/real-vllm/build_bundle.sh)
#   .dev/extra.tar.xz    vllm-router's wheel, and kvbench's own dependencies as a fallback that
#                        the machine's packages shadow
#   .dev/device.sh       unpacks both, writes the dummy models, puts kvbench and vllm-router on
#                        PATH, sets VLLM_USE_FLASHINFER_SAMPLER=0 and HF_HUB_OFFLINE=1
# Run here, where pip reaches PyPI; wheels are kept in DL (default /var/cache/kvbench/device).
# What travels is at most 64 MiB with the checkout: the script prints the sizes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(realpath "$ROOT/../shared/real-vllm")
DL=${1:-/var/cache/kvbench/device}
DEV=$ROOT/.dev
mkdir -p "$DL/vllm" "$DL/extra" "$DEV"
py312=(--only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
[ -n "$(ls "$DL"/vllm/vllm-0.25.0-*.whl 2>/dev/null)" ] ||
  python3 -m pip download -q --no-deps "${py312[@]}" -d "$DL/vllm" vllm==0.25.0
# vllm-router and what its launcher imports; then the pure-Python part of what `import
# kvbench.cli` and the load generator need beyond vLLM's own dependencies (aiohttp, PyYAML and
# prometheus_client come with those; the 64 MiB that travel leave no room for more). The H100
# lent on 2026-12-05 had click, rich, httpx, aiohttp, PyYAML and uvloop already: the fallback
# is for a machine without them.
rm -f "$DL"/extra/*.whl
python3 -m pip download -q --no-deps "${py312[@]}" -d "$DL/extra" \
  vllm-router==0.1.17 setproctitle==1.3.8 orjson==3.13.0 \
  click==8.4.0 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 \
  httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 certifi idna sniffio==1.3.1

if [ ! -f "$DEV/site.tar.xz" ] || [ "$(cat "$DEV/site.stamp" 2>/dev/null)" != "$(cksum < "$SHARED/build_bundle.sh")" ]; then
  bash "$SHARED/build_bundle.sh" "$(ls "$DL"/vllm/vllm-0.25.0-*.whl)" "$ROOT" "$DEV"
  rm -rf "$DEV/operator"   # the checkout's own operator/ travels anyway
  cksum < "$SHARED/build_bundle.sh" > "$DEV/site.stamp"
fi

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/extra"
for w in "$DL"/extra/*.whl; do python3 -m zipfile -e "$w" "$work/extra"; done
strip --strip-unneeded "$work"/extra/vllm_router_rs.abi3.so   # 62 MB, 12 of them symbols
find "$work/extra" -name __pycache__ -prune -exec rm -rf {} +
# Pygments (rich imports it only to highlight code and tracebacks, which kvbench's reports do not
# use): room that the checkout's growing results take.
rm -rf "$work/extra/pygments" "$work"/extra/pygments-*.dist-info
tar -cf - -C "$work" extra | xz -T2 -9e > "$DEV/extra.tar.xz"
cp "$SHARED/make_models.py" "$ROOT/bench/device_site/sitecustomize.py" "$DEV/"
cp "$ROOT/bench/device_site/device.sh" "$DEV/device.sh"
du -ch "$DEV"/*.tar.xz | tail -1
du -sh "$DEV"
