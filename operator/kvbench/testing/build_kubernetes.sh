#!/usr/bin/env bash
# Build the Kubernetes binaries the test cluster runs (apiserver, controller
# manager, scheduler, kubectl, and the nodes' kubelet and kube-proxy) from Debian's
# `kubernetes` source package, with the pod sandbox's `pause` from the same source
# (build/pause/linux/pause.c, as its Makefile builds it), and install the runtime
# dependency etcd. Called by kvbench.testing.build.
#
# The binaries are cached outside the repo, keyed by version and this script's hash
# (kvbench.testing.build passes the directory), so only the first run on a machine pays
# for the build (~3.5 min on 2 cores). Prints the cache's bin directory on its last
# line. Must run as root (apt-get).
#
#   KVBENCH_K8S_CACHE    cache root (default /var/cache/kvbench)
#   KVBENCH_K8S_BIN_DIR  where the binaries go (default under the cache root)
set -euo pipefail

VERSION=1.20.2
CACHE_ROOT=${KVBENCH_K8S_CACHE:-/var/cache/kvbench}
BIN_DIR=${KVBENCH_K8S_BIN_DIR:-$CACHE_ROOT/kubernetes-$VERSION/bin}
TARGETS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2

log() { echo "build-test-cluster: $*" >&2; }

have_binaries() {
    local t
    for t in "${TARGETS[@]}" pause; do [[ -x "$BIN_DIR/$t" ]] || return 1; done
}

apt_updated=0
apt_install() {
    if [[ $apt_updated == 0 ]]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

enable_deb_src() {
    local list=/etc/apt/sources.list.d/kvbench-deb-src.sources
    if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ \
        && ! grep -qs '^deb-src' /etc/apt/sources.list; then
        log "adding deb-src for bookworm main ($list)"
        cat >"$list" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        apt_updated=0
    fi
}

# Runtime dependencies: always, even with cached binaries (a fresh machine).
if ! command -v etcd >/dev/null; then
    log "installing etcd-server"
    apt_install etcd-server
fi

if have_binaries; then
    log "cached: $BIN_DIR"
    echo "$BIN_DIR"
    exit 0
fi

enable_deb_src
log "installing build dependencies"
apt_install golang-go rsync jq golang-github-modern-go-reflect2-dev dpkg-dev gcc libc6-dev

WORK=$(mktemp -d /var/tmp/kvbench-k8s-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
log "fetching Debian's kubernetes source into $WORK"
# Debian versions it 1.20.5+really1.20.2: the source is 1.20.2.
apt-get source -qq kubernetes >&2
SRC_DIR=$(find . -maxdepth 1 -type d -name "kubernetes-*really$VERSION" | head -n 1)
[[ -n "$SRC_DIR" ]] || { log "no kubernetes $VERSION source: $(ls)"; exit 1; }
cd "$SRC_DIR"

# The vendored reflect2 1.0.1 crashes the apiserver under Go 1.19 ("fatal error:
# fault" in map iteration); Debian's 1.0.2 does not.
rm -rf vendor/github.com/modern-go/reflect2
cp -r "$REFLECT2" vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod

# The test cluster's nodes share the host's file system, and 1.20's kubelet keeps pod logs
# under a constant /var/log/pods, from which its container GC removes every pod's log
# directory it does not know: the other nodes' pods', while they run (`kubectl logs` then
# reads nothing). $KVBENCH_POD_LOGS_DIR gives each node's kubelet its own, as later
# kubelets' `podLogsDir` setting does; unset, the kubelet is 1.20's.
RUNTIME=pkg/kubelet/kuberuntime
grep -q '^'$'\t''podLogsRootDirectory = "/var/log/pods"$' "$RUNTIME/kuberuntime_manager.go" \
    || { log "no podLogsRootDirectory constant in $RUNTIME/kuberuntime_manager.go"; exit 1; }
sed -i '/^'$'\t''podLogsRootDirectory = "\/var\/log\/pods"$/d' "$RUNTIME/kuberuntime_manager.go"
cat >"$RUNTIME/kvbench_pod_logs_dir.go" <<'GO'
package kuberuntime

import "os"

// podLogsRootDirectory is $KVBENCH_POD_LOGS_DIR, else 1.20's constant: one per test node.
var podLogsRootDirectory = func() string {
	if dir := os.Getenv("KVBENCH_POD_LOGS_DIR"); dir != "" {
		return dir
	}
	return "/var/log/pods"
}()
GO

mkdir -p .go/src/k8s.io
ln -s ../../.. .go/src/k8s.io/kubernetes
log "building ${TARGETS[*]} (a few minutes)"
WHAT=""
for t in "${TARGETS[@]}"; do WHAT+="cmd/$t "; done
GOPATH="$PWD/.go" CGO_ENABLED=0 \
    make WHAT="${WHAT% }" >&2
# The Makefile's flags (CFLAGS in build/pause/Makefile), its TAG as the version.
PAUSE_TAG=$(sed -n 's/^TAG = //p' build/pause/Makefile)
gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_TAG" -o _output/bin/pause build/pause/linux/pause.c

# Install atomically, so an interrupted build never leaves a half cache.
STAGE=$(mktemp -d "$CACHE_ROOT/.stage.XXXXXX" 2>/dev/null || true)
if [[ -z "$STAGE" ]]; then
    mkdir -p "$CACHE_ROOT"
    STAGE=$(mktemp -d "$CACHE_ROOT/.stage.XXXXXX")
fi
for t in "${TARGETS[@]}" pause; do cp "_output/bin/$t" "$STAGE/$t"; done
chmod 755 "$STAGE"
mkdir -p "$(dirname "$BIN_DIR")"
rm -rf "$BIN_DIR"
mv "$STAGE" "$BIN_DIR"
# Builds of other versions of this script are stale.
for old in "$CACHE_ROOT"/kubernetes-"$VERSION"*; do
    [[ "$old" == "$(dirname "$BIN_DIR")" ]] || rm -rf "$old"
done
log "built: $BIN_DIR"
echo "$BIN_DIR"
