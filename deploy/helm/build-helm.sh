#!/usr/bin/env bash
# Builds helm from its Go module into ${TESSERA_CACHE:-$HOME/.cache/tessera}/helm/helm, unless a helm is already
# on PATH or built. Prints the helm binary's path as its last line. Offline except for the Go module proxy.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
cache_root="${TESSERA_CACHE:-$HOME/.cache/tessera}"
out_dir="${cache_root}/helm"
bin="${out_dir}/helm-${HELM_VERSION}"

if command -v helm >/dev/null 2>&1; then
    command -v helm
    exit 0
fi
if [[ -x "${bin}" ]]; then
    echo "${bin}"
    exit 0
fi

mkdir -p "${out_dir}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cd "${work}"
export GOFLAGS="-buildvcs=false" CGO_ENABLED=0
# `go install pkg@version` needs no go.mod of ours; GOBIN puts the result where we want it.
GOBIN="${work}" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
mv -f "${work}/helm" "${bin}.tmp"
mv -f "${bin}.tmp" "${bin}"
ln -sfn "$(basename "${bin}")" "${out_dir}/helm"
echo "${bin}"
