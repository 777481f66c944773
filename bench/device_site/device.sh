# shellcheck shell=bash
# Sourced from the checkout's root on the lent GPU machine (bench/device_bundle.sh builds .dev/):
# unpacks vLLM and the extras once per bundle, writes the dummy models, puts `kvbench` and
# `vllm-router` on PATH and checks that both import.
_unpack() {  # ARCHIVE DIR
  local stamp; stamp=$(cksum < "$1" | cut -d' ' -f1)
  [ -f "$2/.stamp-$stamp" ] && return 0
  rm -rf "$2" && mkdir -p "$2"
  xz -T0 -dc "$1" | tar -xf - -C "$2" && touch "$2/.stamp-$stamp"
}
_unpack .dev/site.tar.xz /tmp/site || return 1
_unpack .dev/extra.tar.xz /tmp/kvextra || return 1
export PYTHONPATH="$PWD/.dev:/tmp/site:$PWD/operator" PYTHONUNBUFFERED=1
export KVBENCH_DEVICE_FALLBACK=/tmp/kvextra/extra
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
mkdir -p /tmp/kvbin
printf '#!/bin/sh\nexec python3 -m kvbench "$@"\n' > /tmp/kvbin/kvbench
printf '#!/bin/sh\nexec python3 -c "import sys; from vllm_router.launch_router import main; sys.argv[0] = \\"vllm-router\\"; sys.exit(main())" "$@"\n' > /tmp/kvbin/vllm-router
chmod +x /tmp/kvbin/kvbench /tmp/kvbin/vllm-router
export PATH="/tmp/kvbin:$PATH"
[ -f /tmp/models/Qwen3-1.7B/tokenizer.json ] || python3 .dev/make_models.py /tmp/models || return 1
python3 -c 'import kvbench.cli, vllm, vllm_router.launch_router' || return 1
