#!/usr/bin/env bash
# Builds one release's upstream Kubernetes control-plane binaries and etcd from the Go module
# k8s/<version>/ into ${TESSERA_CACHE:-$HOME/.cache/tessera}/k8s-<version>/bin. The release is $K8S_VERSION,
# by default the one in k8s/default-version. A stamp (hash of go.mod, go.sum, this script and the Go version)
# makes a second run a no-op. Prints the bin directory as its last line on stdout.
# Usage: [K8S_VERSION=v1.36.3] build.sh [--check]   (--check: exit 0 when up to date, 3 when a build is needed)
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="${K8S_VERSION:-$(cat "${here}/k8s/default-version")}"
module="${here}/k8s/${K8S_VERSION}"
if [[ ! -f "${module}/go.mod" ]]; then
    echo "$0: no module for Kubernetes ${K8S_VERSION} in e2e/cluster/k8s/ (have: $(cd "${here}/k8s" \
&& ls -d v* | tr '\n' ' ')); lay one out with: bash e2e/cluster/new-version.sh ${K8S_VERSION}" >&2
    exit 2
fi
ETCD_VERSION="$(sed -n 's/^[[:space:]]*go.etcd.io\/etcd\/server\/v3 \(v[^[:space:]]*\).*/\1/p' "${module}/go.mod" | head -1)"
cache_root="${TESSERA_CACHE:-$HOME/.cache/tessera}"
bin_dir="${cache_root}/k8s-${K8S_VERSION}/bin"
stamp="${bin_dir}/.build-stamp"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)

log() { printf '[build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

inputs_hash() {
    { cat "${module}/go.mod" "${module}/go.sum" "${here}/build.sh"; go version; } \
        | sha256sum | cut -d' ' -f1
}

package_of() {
    case "$1" in
        etcd) echo "go.etcd.io/etcd/server/v3" ;;
        *) echo "k8s.io/kubernetes/cmd/$1" ;;
    esac
}

all_present() {
    local b
    for b in "${binaries[@]}"; do
        [[ -x "${bin_dir}/${b}" ]] || return 1
    done
}

want="$(inputs_hash)"
# Stamp format v1: first line "tessera-build-stamp/v1", second the inputs hash.
if [[ -f "${stamp}" ]] && all_present \
    && [[ "$(sed -n 1p "${stamp}")" == "tessera-build-stamp/v1" ]] \
    && [[ "$(sed -n 2p "${stamp}")" == "${want}" ]]; then
    log "up to date: ${bin_dir}"
    echo "${bin_dir}"
    exit 0
fi
if [[ ${check_only} -eq 1 ]]; then
    log "build needed: ${bin_dir} is missing binaries or was built from other inputs"
    exit 3
fi

mkdir -p "${bin_dir}"
rm -f "${stamp}"

# Without these -X flags /version and the binaries' --version report v0.0.0-master.
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
    k8s_ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    k8s_ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"

export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=readonly"
cd "${module}"

total_start=${SECONDS}
for b in "${binaries[@]}"; do
    start=${SECONDS}
    log "building ${b} ($(package_of "${b}")) ..."
    flags="${k8s_ldflags}"
    [[ "${b}" == etcd ]] && flags="${etcd_ldflags}"
    # Build to a temporary name so an interrupted build never leaves a truncated binary.
    go build -p 2 -ldflags "${flags}" -o "${bin_dir}/.${b}.tmp" "$(package_of "${b}")"
    mv -f "${bin_dir}/.${b}.tmp" "${bin_dir}/${b}"
    log "built ${b} in $((SECONDS - start))s (total $((SECONDS - total_start))s)"
done

printf 'tessera-build-stamp/v1\n%s\n' "${want}" > "${stamp}.tmp"
sync "${stamp}.tmp" 2>/dev/null || true
mv -f "${stamp}.tmp" "${stamp}"
log "all binaries built in $((SECONDS - total_start))s: ${bin_dir}"
echo "${bin_dir}"
