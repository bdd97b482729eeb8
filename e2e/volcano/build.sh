#!/usr/bin/env bash
# Builds Volcano's scheduler and controller manager from the source snapshot in ../shared/volcano (named, with
# its sha256, in e2e/volcano/snapshot) into ${TESSERA_CACHE:-$HOME/.cache/tessera}/volcano/<snapshot>/, and
# copies the snapshot's CRDs there (crd/). Volcano's code is never copied into this repository: the tarball is
# unpacked below the cache and built with the Go modules the proxy serves (../shared/volcano/README.md).
#
# Three binaries: vc-scheduler and vc-controller-manager as the snapshot's go.mod pins them
# (k8s.io/dynamic-resource-allocation v0.36.1), and vc-scheduler-dra-v0.36.3: the same scheduler with only that
# module at v0.36.3, which carries kubernetes/kubernetes#139040 (docs/volcano.md, "Over-commit of shared
# GPUs"). A stamp (snapshot hash, this script, the Go version) makes a second run a no-op. Prints the
# directory as its last line on stdout, and each binary's build time.
# Usage: build.sh [--check]   (--check: exit 0 when up to date, 3 when a build is needed)
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
read -r snapshot want_sha < "${here}/snapshot"
# ../shared beside the checkout; for a git worktree elsewhere, beside the main checkout.
shared="${TESSERA_SHARED:-${repo}/../shared}"
if [[ -z "${TESSERA_SHARED:-}" && ! -d "${shared}" ]]; then
    common="$(git -C "${repo}" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)"
    [[ -n "${common}" ]] && shared="$(dirname "${common}")/../shared"
fi
tarball="${shared}/volcano/volcano-src-${snapshot}.tar.gz"
out="${TESSERA_CACHE:-$HOME/.cache/tessera}/volcano/${snapshot}"
stamp="${out}/.build-stamp"
binaries=(vc-scheduler vc-controller-manager vc-scheduler-dra-v0.36.3)
# The one module the patched scheduler takes from a newer patch release; structured-merge-diff stays where
# the snapshot has it, so that only the allocator and what imports it are built again.
patched_dra="k8s.io/dynamic-resource-allocation@v0.36.3"
kept_smd="sigs.k8s.io/structured-merge-diff/v6@v6.3.2"

log() { printf '[volcano/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

inputs_hash() {
    { echo "${snapshot} ${want_sha}"; cat "${here}/build.sh"; go version; } | sha256sum | cut -d' ' -f1
}

all_present() {
    local b
    for b in "${binaries[@]}"; do
        [[ -x "${out}/bin/${b}" ]] || return 1
    done
    [[ -d "${out}/crd" ]]
}

want="$(inputs_hash)"
# Stamp format v1: first line "tessera-volcano-stamp/v1", second the inputs hash.
if [[ -f "${stamp}" ]] && all_present \
    && [[ "$(sed -n 1p "${stamp}")" == "tessera-volcano-stamp/v1" ]] \
    && [[ "$(sed -n 2p "${stamp}")" == "${want}" ]]; then
    log "up to date: ${out}"
    echo "${out}"
    exit 0
fi
# exit 4: a build is needed and there is no snapshot to build from (make test then skips Volcano's scenarios)
if [[ ! -f "${tarball}" ]]; then
    echo "$0: no Volcano snapshot at ${tarball} (set TESSERA_SHARED to the folder holding volcano/)" >&2
    exit 4
fi
if [[ ${check_only} -eq 1 ]]; then
    log "build needed: ${out} is missing binaries or was built from other inputs"
    exit 3
fi
got_sha="$(sha256sum "${tarball}" | cut -d' ' -f1)"
if [[ "${got_sha}" != "${want_sha}" ]]; then
    echo "$0: ${tarball} has sha256 ${got_sha}, e2e/volcano/snapshot names ${want_sha}" >&2
    exit 2
fi

mkdir -p "${out}/bin"
rm -f "${stamp}"
src="${out}/src"
rm -rf "${src}" "${out}/crd"
mkdir -p "${src}"
tar -xzf "${tarball}" -C "${src}"
cd "${src}/volcano"
cp -r config/crd "${out}/crd"

# The snapshot's go.mod and go.sum list every module; -mod=mod lets go fill in what the proxy serves.
export GOFLAGS="-mod=mod -buildvcs=false"
total_start=${SECONDS}
build() {  # build <binary> <package> [go flags...]
    local name="$1" pkg="$2" start=${SECONDS}
    shift 2
    log "building ${name} (${pkg}) ..."
    # To a temporary name, so an interrupted build never leaves a truncated binary.
    go build "$@" -ldflags "-s -w" -o "${out}/bin/.${name}.tmp" "${pkg}"
    mv -f "${out}/bin/.${name}.tmp" "${out}/bin/${name}"
    log "built ${name} in $((SECONDS - start))s (total $((SECONDS - total_start))s)"
}
build vc-scheduler ./cmd/scheduler
build vc-controller-manager ./cmd/controller-manager
cp go.mod go.dra.mod
cp go.sum go.dra.sum
go mod edit -modfile=go.dra.mod -replace="${patched_dra%@*}=${patched_dra}" -replace="${kept_smd%@*}=${kept_smd}"
build vc-scheduler-dra-v0.36.3 ./cmd/scheduler -modfile=go.dra.mod

cd "${out}"
rm -rf "${src}"
printf 'tessera-volcano-stamp/v1\n%s\n' "${want}" > "${stamp}.tmp"
sync "${stamp}.tmp" 2>/dev/null || true
mv -f "${stamp}.tmp" "${stamp}"
log "all binaries built in $((SECONDS - total_start))s: ${out}"
echo "${out}"
