#!/usr/bin/env bash
# Builds what a real e2e node runs, offline, into ${TESSERA_CACHE:-$HOME/.cache/tessera}/realnode/:
#   k8s-<version>/kubelet            k8s.io/kubernetes/cmd/kubelet from e2e/cluster/k8s/<version>, the module the
#                                    control plane of that release is built from ($K8S_VERSION, by default
#                                    e2e/cluster/k8s/default-version)
#   bin/containerd, bin/containerd-shim-runc-v2, bin/ctr, bin/runc, cni/{loopback,tap,host-local}
#                                    from the module in e2e/realnode/gomod (containerd 2.x, runc, CNI plugins)
#   images/*.oci.tar, bin/pause      the sandbox (pause) image and the probe image (e2e/realnode/image.py)
# Every output has its own stamp (a hash of its inputs and the toolchain): a matching stamp skips it, so a second
# run is a no-op and an interrupted run resumes. Prints the output directory as its last line on stdout.
# Usage: [K8S_VERSION=v1.36.3] build.sh [--check]   (--check: exit 0 when up to date, 3 when something needs building; builds nothing)
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2
CNI_VERSION=v1.9.1
BUSYBOX_PACKAGE=busybox-static

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
K8S_VERSION="${K8S_VERSION:-$(cat "${repo}/e2e/cluster/k8s/default-version")}"
kubelet_mod="${repo}/e2e/cluster/k8s/${K8S_VERSION}"
if [[ ! -f "${kubelet_mod}/go.mod" ]]; then
    echo "$0: no module for Kubernetes ${K8S_VERSION} in e2e/cluster/k8s/; lay one out with:" \
        "bash e2e/cluster/new-version.sh ${K8S_VERSION}" >&2
    exit 2
fi
node_mod="${here}/gomod"
out="${TESSERA_CACHE:-$HOME/.cache/tessera}/realnode"
bin="${out}/bin"
kubelet_dir="${out}/k8s-${K8S_VERSION}"
cni="${out}/cni"
images="${out}/images"
debs="${out}/debs"

log() { printf '[realnode/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
hash_of() { { cat "$@"; go version; cc --version | head -1; } | sha256sum | cut -d' ' -f1; }

kubelet_inputs=("${kubelet_mod}/go.mod" "${kubelet_mod}/go.sum" "${here}/build.sh")
node_inputs=("${node_mod}/go.mod" "${node_mod}/go.sum" "${here}/build.sh")
image_inputs=("${here}/probe.c" "${here}/pause.c" "${here}/image.py" "${repo}/deploy/image/oci.py"
    "${repo}/interceptor/include/tessera_cuda.h" "${here}/build.sh")

# Stamp format v1: first line "tessera-realnode-stamp/v1", second the inputs hash.
fresh() {  # fresh <output> <hash>
    local stamp
    stamp="$(dirname "$1")/.$(basename "$1").stamp"
    [[ -e "$1" && -f "${stamp}" ]] && [[ "$(sed -n 1p "${stamp}")" == "tessera-realnode-stamp/v1" ]] \
        && [[ "$(sed -n 2p "${stamp}")" == "$2" ]]
}
stamp() {  # stamp <output> <hash>
    local s
    s="$(dirname "$1")/.$(basename "$1").stamp"
    printf 'tessera-realnode-stamp/v1\n%s\n' "$2" > "${s}.tmp"
    mv -f "${s}.tmp" "${s}"
}

kubelet_hash="$(hash_of "${kubelet_inputs[@]}")"
node_hash="$(hash_of "${node_inputs[@]}")"
image_hash="$(hash_of "${image_inputs[@]}")"

# name | output | module dir | package | cgo | tags | ldflags
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1"
    k8s_ldflags+=" -X ${pkg}.gitMinor=$(echo "${K8S_VERSION}" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
done
ctrd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
ctrd_ldflags+=" -X github.com/containerd/containerd/v2/version.Revision=tessera-e2e"
cni_ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_VERSION}"
ctrd_tags="no_btrfs no_devmapper no_zfs"
go_targets=(
    "kubelet|${kubelet_dir}/kubelet|${kubelet_mod}|k8s.io/kubernetes/cmd/kubelet|0||${k8s_ldflags}"
    "containerd|${bin}/containerd|${node_mod}|github.com/containerd/containerd/v2/cmd/containerd|0|${ctrd_tags}|${ctrd_ldflags}"
    "containerd-shim-runc-v2|${bin}/containerd-shim-runc-v2|${node_mod}|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2|0|${ctrd_tags}|${ctrd_ldflags}"
    "ctr|${bin}/ctr|${node_mod}|github.com/containerd/containerd/v2/cmd/ctr|0|${ctrd_tags}|${ctrd_ldflags}"
    # runc's nsenter is C, so cgo; `seccomp` links libseccomp (Debian's libseccomp-dev): containerd gives every
    # pod sandbox the runtime/default profile, which a runc without seccomp refuses ("seccomp not supported").
    "runc|${bin}/runc|${node_mod}|github.com/opencontainers/runc|1|seccomp|-s -w -X main.version=${RUNC_VERSION#v}"
    "loopback|${cni}/loopback|${node_mod}|github.com/containernetworking/plugins/plugins/main/loopback|0||${cni_ldflags}"
    "tap|${cni}/tap|${node_mod}|github.com/containernetworking/plugins/plugins/main/tap|0||${cni_ldflags}"
    "host-local|${cni}/host-local|${node_mod}|github.com/containernetworking/plugins/plugins/ipam/host-local|0||${cni_ldflags}"
)
# bin/pause is also PID 1 of the node's namespaces (holder.sh): it reaps the orphans the shims leave.
image_targets=("${images}/pause.oci.tar" "${images}/probe.oci.tar" "${bin}/pause")

stale=()
for t in "${go_targets[@]}"; do
    IFS='|' read -r name output moddir _ <<< "${t}"
    h="${node_hash}"; [[ "${moddir}" == "${kubelet_mod}" ]] && h="${kubelet_hash}"
    fresh "${output}" "${h}" || stale+=("${name}")
done
for output in "${image_targets[@]}"; do
    fresh "${output}" "${image_hash}" || stale+=("$(basename "${output}")")
done
if [[ ${#stale[@]} -eq 0 ]]; then
    log "up to date: ${out}"
    echo "${out}"
    exit 0
fi
if [[ ${check_only} -eq 1 ]]; then
    log "build needed: ${stale[*]}"
    exit 3
fi

mkdir -p "${bin}" "${kubelet_dir}" "${cni}" "${images}" "${debs}"

# Debian packages the build needs: libseccomp-dev (runc's seccomp support). Installed once, as CI does.
apt_install() {
    log "installing $* with apt-get (needs root) ..."
    if ! apt-get install -y -q "$@" >&2; then
        apt-get update -q >&2
        apt-get install -y -q "$@" >&2
    fi
}
if ! fresh "${bin}/runc" "${node_hash}" && ! dpkg -s libseccomp-dev > /dev/null 2>&1; then
    apt_install libseccomp-dev
fi
export GOFLAGS="-buildvcs=false -mod=readonly"
total_start=${SECONDS}

for t in "${go_targets[@]}"; do
    IFS='|' read -r name output moddir pkg cgo tags ldflags <<< "${t}"
    h="${node_hash}"; [[ "${moddir}" == "${kubelet_mod}" ]] && h="${kubelet_hash}"
    fresh "${output}" "${h}" && continue
    start=${SECONDS}
    log "building ${name} (${pkg}) ..."
    # A temporary name, so an interrupted build never leaves a truncated binary behind.
    (cd "${moddir}" && CGO_ENABLED="${cgo}" go build -p 2 -tags "${tags}" -ldflags "${ldflags}" \
        -o "${output}.tmp" "${pkg}")
    mv -f "${output}.tmp" "${output}"
    stamp "${output}" "${h}"
    log "built ${name} in $((SECONDS - start))s (total $((SECONDS - total_start))s)"
done

build_images() {
    local work deb
    work="$(mktemp -d)"
    trap 'rm -rf "${work}"' RETURN
    # busybox from Debian's package (a shell and coreutils for the probe image); the .deb is kept in the cache.
    deb="$(ls "${debs}"/${BUSYBOX_PACKAGE}_*.deb 2>/dev/null | head -1 || true)"
    if [[ -z "${deb}" ]]; then
        log "fetching the ${BUSYBOX_PACKAGE} package with apt-get download ..."
        if ! (cd "${debs}" && apt-get download -q "${BUSYBOX_PACKAGE}" >&2); then
            log "apt-get download failed; refreshing the package lists once (apt-get update) and retrying"
            apt-get update -q >&2
            (cd "${debs}" && apt-get download -q "${BUSYBOX_PACKAGE}" >&2)
        fi
        deb="$(ls "${debs}"/${BUSYBOX_PACKAGE}_*.deb | head -1)"
    fi
    dpkg-deb -x "${deb}" "${work}/busybox"
    make -s -C "${repo}/interceptor" build/fake/libcuda.so.1 >&2
    cc -std=gnu11 -O2 -Wall -Wextra -Werror -static -o "${work}/pause" "${here}/pause.c"
    cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"${repo}/interceptor/include" -o "${work}/probe" \
        "${here}/probe.c" -L"${repo}/interceptor/build/fake" -l:libcuda.so.1
    install -m 0755 "${work}/pause" "${bin}/pause.tmp"
    python3 "${here}/image.py" pause --pause "${work}/pause" --out "${images}/pause.oci.tar.tmp"
    python3 "${here}/image.py" probe --probe "${work}/probe" --busybox "${work}/busybox/bin/busybox" \
        --out "${images}/probe.oci.tar.tmp"
    local output
    for output in "${image_targets[@]}"; do
        mv -f "${output}.tmp" "${output}"
        stamp "${output}" "${image_hash}"
    done
}

images_fresh=1
for output in "${image_targets[@]}"; do fresh "${output}" "${image_hash}" || images_fresh=0; done
if [[ ${images_fresh} -eq 0 ]]; then
    start=${SECONDS}
    log "building the pause and probe images ..."
    build_images
    log "built the images in $((SECONDS - start))s (total $((SECONDS - total_start))s)"
fi

log "all node components built in $((SECONDS - total_start))s: ${out}"
echo "${out}"
