#!/usr/bin/env bash
# Builds promtool and the Prometheus server from the upstream Go module github.com/prometheus/prometheus (the
# version module/go.mod pins) into ${TESSERA_CACHE:-$HOME/.cache/tessera}/prometheus-<version>/bin: promtool
# for `promtool test rules` over the chart's alerts (tests/unit/deploy/test_alert_rules.py), the server for
# the real-node scenario that evaluates the dashboard and the alerts against live data
# (e2e/scenarios/realnode/test_real_prometheus.py). The server is built without the `builtinassets` tag: no
# web UI, the HTTP API is all the tests use. A stamp (hash of go.mod, go.sum, this script and the Go version)
# makes a second run a no-op. Prints the bin directory as its last line on stdout.
# Usage: build.sh [--check]   (--check: exit 0 when up to date, 3 when a build is needed)
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="${here}/module"
version="$(sed -n 's/^\(require\)\{0,1\}[[:space:]]*github.com\/prometheus\/prometheus \(v[^[:space:]]*\).*/\2/p' "${module}/go.mod" | head -1)"
cache_root="${TESSERA_CACHE:-$HOME/.cache/tessera}"
bin_dir="${cache_root}/prometheus-${version}/bin"
stamp="${bin_dir}/.build-stamp"
binaries=(promtool prometheus)

log() { printf '[prometheus/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

inputs_hash() {
    { cat "${module}/go.mod" "${module}/go.sum" "${here}/build.sh"; go version; } | sha256sum | cut -d' ' -f1
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
export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=readonly"
cd "${module}"
ldflags="-s -w"
total_start=${SECONDS}
for b in "${binaries[@]}"; do
    start=${SECONDS}
    log "building ${b} (github.com/prometheus/prometheus/cmd/${b} ${version}) ..."
    # to a temporary name, so an interrupted build never leaves a truncated binary
    go build -p 2 -ldflags "${ldflags}" -o "${bin_dir}/.${b}.tmp" "github.com/prometheus/prometheus/cmd/${b}"
    mv -f "${bin_dir}/.${b}.tmp" "${bin_dir}/${b}"
    log "built ${b} in $((SECONDS - start))s"
done
printf 'tessera-build-stamp/v1\n%s\n' "${want}" > "${stamp}.tmp"
sync "${stamp}.tmp" 2>/dev/null || true
mv -f "${stamp}.tmp" "${stamp}"
log "built in $((SECONDS - total_start))s: ${bin_dir}"
echo "${bin_dir}"
