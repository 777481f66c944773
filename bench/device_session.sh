#!/bin/bash
# One device call that runs several experiment files on real vLLM in turn, each under what is
# left of SECONDS, and leaves in $OUT/DEST.tar.xz (a / in DEST as _) its results directory
# (less the workers' logs, which would not fit what comes back) with the router arms' logs
# (work/logs/*-arm.log, for bench/router_decisions.py) and kvbench's output (DEST.out);
# $OUT/gpu.txt names the GPU. bench/device_bundle.sh builds the .dev/ it needs.
# Carry .dev/ with the checkout; from the checkout's root on the GPU machine:
#
#   bash bench/device_session.sh 560 \
#       real-vllm-kv-aware-6w-p24-decisions.yaml:real-vllm-kv-aware-6w-p24-decisions \
#       real-vllm-arms-4w-routers-again.yaml:real-vllm-arms-4w-routers-again/1
#
# FILE is under bench/real-vllm-experiments/; a file left under a minute is skipped.
# shellcheck source=/dev/null
source .dev/device.sh || exit 1
end=$(( $(date +%s) + $1 )); shift
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
for pair in "$@"; do
  file=${pair%%:*}; dest=${pair#*:}
  left=$(( end - $(date +%s) ))
  [ "$left" -gt 60 ] || { echo "skip $file: $left s left"; continue; }
  res=/tmp/res/$dest; rm -rf "$res"; mkdir -p "$(dirname "$res")"
  t0=$(date +%s)
  timeout -s INT "$left" kvbench run "bench/real-vllm-experiments/$file" --out "$res" --engine vllm \
      --gpus 0 --model-dir /tmp/models --vllm-arg=--load-format=dummy > "/tmp/res/$dest.out" 2>&1
  rc=$?
  echo "$file -> $dest: rc $rc in $(( $(date +%s) - t0 )) s"
  # One archive a file: what comes back from $OUT is limited in count and depth.
  (cd /tmp/res && { find "$dest" -path "$dest/work" -prune -o -type f -print
                    find "$dest/work/logs" -name '*-arm.log' 2>/dev/null; echo "$dest.out"; } |
     tar -cJf "$OUT/${dest//\//_}.tar.xz" -T -)
done
