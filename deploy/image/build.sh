#!/usr/bin/env bash
# Builds the node plugin image with no registry, no container engine and no network beyond the package
# registries, as an OCI image-layout archive for `ctr images import`, into ${TESSERA_CACHE:-$HOME/.cache/tessera}/image/:
#   rootfs-<key>.tar            layer 1: Debian's root file system with Python, from mmdebstrap (cached by its inputs)
#   tessera-<version>.oci.tar   the image: layer 1 + layer 2 (/opt/tessera/site, /opt/tessera/lib/libtessera.so,
#                               /usr/local/bin/tessera); what it is: deploy/image/image.json
# Reproducible: the same tree gives the same manifest digest. A stamp (a hash of every input) skips the whole build
# when nothing changed. Needs root (mmdebstrap --mode=root, the chroot smoke test) and `make dev` (the venv, the
# generated gRPC code). Prints image, digest, size and archive on stdout; the archive path is the last line.
# Usage: build.sh [--force]   (--force: rebuild layer 2 and the archive even when the stamp matches)
set -euo pipefail

force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
out="${TESSERA_CACHE:-$HOME/.cache/tessera}/image"
sources=/etc/apt/sources.list.d/debian.sources
python="${repo}/.venv/bin/python"
[[ -x "${python}" ]] || python=python3
start=${SECONDS}

log() { printf '[image/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
step() { (cd "${repo}" && "${python}" -m deploy.image.build "$@"); }

if [[ ! -f "${repo}/kubelet_plugin/proto/gen/__init__.py" ]]; then
    echo "$0: kubelet_plugin/proto/gen is missing: run \`make dev\` (or \`make proto\`) first" >&2
    exit 2
fi

# A fresh machine has no mmdebstrap: Debian packages it (root, like the rest of this build).
if ! command -v mmdebstrap > /dev/null 2>&1; then
    log "installing mmdebstrap with apt-get ..."
    if ! apt-get install -y -q mmdebstrap >&2; then
        apt-get update -q >&2
        apt-get install -y -q mmdebstrap >&2
    fi
fi

epoch="${SOURCE_DATE_EPOCH:-$(sed -n 's/^ *"source_date_epoch": *\([0-9]*\).*/\1/p' "${here}/image.json")}"
export SOURCE_DATE_EPOCH="${epoch}"
mapfile -t mmdebstrap_args < <(step mmdebstrap-args)
name="$(step name)"
version="${name##*:}"
archive="${out}/tessera-${version}.oci.tar"
mkdir -p "${out}"
# One build at a time per cache: checkouts share it (layer 1 files of other keys stay for them).
exec 9> "${out}/.lock"
flock 9

# Layer 1, keyed by everything that decides its bytes (Debian's package index aside: see README.md).
rootfs_key="$({ printf '%s\n' "${mmdebstrap_args[@]}" "${epoch}"; cat "${sources}"; mmdebstrap --version; } \
    | sha256sum | cut -c1-16)"
rootfs="${out}/rootfs-${rootfs_key}.tar"

# The whole build's inputs: the product's sources, the library's, the image's own files, its name (the chart's
# appVersion, not the rest of the chart), layer 1's key.
inputs_hash() {
    (
        cd "${repo}"
        find dra_driver kubelet_plugin cdi admission scheduler_extender interceptor/src interceptor/include -type f \
            ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
        sha256sum pyproject.toml interceptor/Makefile interceptor/tessera.map \
            deploy/image/*.py deploy/image/image.json deploy/image/requirements.txt deploy/image/build.sh
        echo "${name} ${rootfs_key} ${epoch} $("${python}" --version) $(cc --version | head -1)"
    ) | sha256sum | cut -d' ' -f1
}
stamp="${out}/.tessera-${version}.oci.tar.stamp"
hash="$(inputs_hash)"

report() {  # the stable summary: image, digest, size, then the archive path as the last line
    local digest bytes
    digest="$(sed -n 3p "${stamp}")"
    bytes="$(sed -n 4p "${stamp}")"
    echo "image: ${name}"
    echo "digest: ${digest}"
    awk -v b="${bytes}" 'BEGIN { printf "size: %.1f MiB\n", b / 1048576 }'
    echo "archive: ${archive}"
    echo "${archive}"
}

# Stamp format v1: "tessera-image-stamp/v1", the inputs hash, the manifest digest, the layers' bytes.
if [[ ${force} -eq 0 && -f "${archive}" && -f "${stamp}" && "$(sed -n 1p "${stamp}")" == "tessera-image-stamp/v1" \
    && "$(sed -n 2p "${stamp}")" == "${hash}" ]]; then
    log "up to date: ${archive}"
    report
    exit 0
fi

if [[ ! -f "${rootfs}" ]]; then
    log "layer 1: mmdebstrap ${mmdebstrap_args[*]} (about a minute) ..."
    # mmdebstrap picks the format from the name's suffix: the temporary name ends in .tar too
    mmdebstrap --quiet "${mmdebstrap_args[@]}" "${rootfs%.tar}.tmp.tar" - < "${sources}" >&2
    mv -f "${rootfs%.tar}.tmp.tar" "${rootfs}"
    log "layer 1 done ($((SECONDS - start))s)"
fi

work="$(mktemp -d "${out}/work.XXXXXX")"
trap 'rm -rf "${work}" "${archive}.tmp"' EXIT

# The library from a copy of its sources with the build path mapped away, so a clone elsewhere builds the same
# bytes (the debug information would name the path otherwise).
mkdir -p "${work}/interceptor"
cp -r "${repo}"/interceptor/{Makefile,src,include,tessera.map} "${work}/interceptor/"
make -s -C "${work}/interceptor" build/libtessera.so PYTHON=python3 \
    CC="cc -ffile-prefix-map=${work}/interceptor=/src/interceptor" >&2

log "layer 2: the Python dependencies (deploy/image/requirements.txt) and tessera ..."
# stdout carries only the summary: what the steps' tools print goes to stderr
step --python "${python}" site "${work}/site" >&2
step stage "${work}/root" --site "${work}/site" --library "${work}/interceptor/build/libtessera.so" >&2
mkdir "${work}/base"
tar -x --numeric-owner -C "${work}/base" -f "${rootfs}"
step compile --base "${work}/base" --root "${work}/root" >&2

log "the archive ..."
summary="$(step archive --base "${rootfs}" --root "${work}/root" --out "${archive}.tmp")"
read -r _ digest bytes <<< "${summary}"

log "smoke test: the plugin in the image's root file system (chroot) ..."
step unpack "${archive}.tmp" "${work}/unpacked" >&2
step smoke "${work}/unpacked" >&2

mv -f "${archive}.tmp" "${archive}"
printf 'tessera-image-stamp/v1\n%s\n%s\n%s\n' "${hash}" "${digest}" "${bytes}" > "${stamp}.tmp"
mv -f "${stamp}.tmp" "${stamp}"
log "built in $((SECONDS - start))s"
report
