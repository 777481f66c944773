#!/usr/bin/env bash
# kvbench on kind, for a machine with Docker: a cluster whose worker nodes pretend to have
# GPUs (labels and an nvidia.com/gpu extended resource, no device plugin), the project's image
# built and loaded, the chart installed, and one experiment run with the simulator on the
# cluster (`simulator.onCluster: true`: `kvbench sim` in place of vLLM). It waits for the
# experiment to end and prints its report.
#
# Needs docker, kind, kubectl (1.24 or newer), helm, and kvbench on this machine
# (`python3 -m venv .venv && .venv/bin/pip install -e .`). It has not run on the project's
# CI machines, which have no Docker engine; shellcheck checks it there.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${CLUSTER:-kvbench-demo}
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-kvbench}
IMAGE_TAG=${IMAGE_TAG:-dev}
EXPERIMENT=${EXPERIMENT:-examples/prefix-cache-service.yaml}
NAMESPACE=${NAMESPACE:-benchmarks}
KVBENCH=${KVBENCH:-.venv/bin/kvbench}
PYTHON=${PYTHON:-.venv/bin/python}

for tool in docker kind kubectl helm "$KVBENCH" "$PYTHON"; do
  command -v "$tool" >/dev/null || { echo "kind-demo: $tool not found" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s --config - <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
  - role: worker
EOF
fi
kubectl config use-context "kind-$CLUSTER"

# The example's pools: four workers time-slicing one 24 GB GPU, two on 8 GB GPUs; the load
# generator on a node without GPUs.
fake_gpus() {
  local node=$1 kind=$2 product=$3 count=$4
  kubectl label node "$node" --overwrite "kvbench.io/gpu=$kind" \
    nvidia.com/gpu.present=true "nvidia.com/gpu.product=$product"
  kubectl patch node "$node" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$count\"}]"
}
fake_gpus "$CLUSTER-worker" rtx-24gb NVIDIA-GeForce-RTX-3090 4
fake_gpus "$CLUSTER-worker2" rtx-8gb NVIDIA-GeForce-RTX-3060-Ti 2
kubectl label node "$CLUSTER-worker3" --overwrite kvbench.io/gpu=none

docker build -t "$IMAGE_REPOSITORY:$IMAGE_TAG" .
kind load docker-image "$IMAGE_REPOSITORY:$IMAGE_TAG" --name "$CLUSTER"

kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install kvbench charts/kvbench-operator \
  --namespace kvbench-system --create-namespace --wait \
  --set "image.repository=$IMAGE_REPOSITORY" \
  --set "image.tag=$IMAGE_TAG" \
  --set "watch.namespaces={$NAMESPACE}"

NAME=$("$PYTHON" - "$EXPERIMENT" <<'EOF'
import sys
import yaml
print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])
EOF
)
"$PYTHON" - "$EXPERIMENT" <<'EOF' | kubectl apply -n "$NAMESPACE" -f -
import sys
import yaml
document = yaml.safe_load(open(sys.argv[1]))
document["spec"]["simulator"] = {"onCluster": True}
print(yaml.safe_dump(document))
EOF

echo "kind-demo: waiting for bx/$NAME in $NAMESPACE (kubectl get bx -n $NAMESPACE -w)"
while true; do
  phase=$(kubectl get bx "$NAME" -n "$NAMESPACE" -o jsonpath='{.status.phase}')
  progress=$(kubectl get bx "$NAME" -n "$NAMESPACE" -o jsonpath='{.status.progress.display}')
  echo "kind-demo: ${phase:-Pending} ${progress}"
  case $phase in
    Succeeded) break ;;
    Failed) kubectl describe bx "$NAME" -n "$NAMESPACE"; exit 1 ;;
  esac
  sleep 15
done
"$KVBENCH" report "bx/$NAME" -n "$NAMESPACE"
