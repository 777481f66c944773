#!/bin/bash
# Build .dev/, what travels with the checkout to the lent GPU machine (Python 3.12, torch, no
# vLLM, no Kubernetes client, no network) so that `source .dev/device.sh` there gives
# `kvbench run --engine vllm`, vLLM 0.25.0 and vllm-router 0.1.17:
#   .dev/site.tar.xz     vLLM trimmed for a dense bf16 model on sm_90 (../shared/real-vllm/build_bundle.sh)
#   .dev/extra.tar.xz    vllm-router's wheel and the few modules it imports that the machine lacks,
#                        placed after the machine's own packages on sys.path
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
# vllm-router and what its launcher imports, and sniffio for anyio; the lent machines have the
# rest of what `import kvbench.cli` and the load generator need (click, rich, httpx, anyio,
# markdown-it-py, Pygments, aiohttp, PyYAML: the device library's KINDS.md), and the 64 MiB that
# travel with the checkout leave no room to bring them again.
rm -f "$DL"/extra/*.whl
python3 -m pip download -q --no-deps "${py312[@]}" -d "$DL/extra" \
  vllm-router==0.1.17 setproctitle==1.3.8 orjson==3.13.0 sniffio==1.3.1

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
tar -cf - -C "$work" extra | xz -T2 -9e > "$DEV/extra.tar.xz"
cp "$SHARED/make_models.py" "$ROOT/bench/device_site/sitecustomize.py" "$DEV/"
cp "$ROOT/bench/device_site/device.sh" "$DEV/device.sh"
du -ch "$DEV"/*.tar.xz | tail -1
du -sh "$DEV"
