#!/usr/bin/env bash
# Lays out the Go module that builds one Kubernetes release's components (control plane, etcd, kubelet):
# e2e/cluster/k8s/<version>/{go.mod,go.sum,tools.go}. The staging replaces and the etcd version are read from
# that release's own go.mod, so a new release needs no hand-written list. Run once per release, commit the result.
# Usage: new-version.sh v1.37.2
set -euo pipefail

version="${1:?usage: $0 vMAJOR.MINOR.PATCH}"
[[ "${version}" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "$0: '${version}' is not a release like v1.37.2" >&2; exit 2; }
staging="v0.${version#v1.}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${here}/k8s/${version}"
upstream_mod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
[[ -f "${upstream_mod}" ]] || { echo "$0: the Go module proxy did not serve k8s.io/kubernetes@${version}" >&2; exit 1; }

etcd="$(sed -n 's/^[[:space:]]*go.etcd.io\/etcd\/server\/v3 \(v[^[:space:]]*\).*/\1/p' "${upstream_mod}" | head -1)"
mapfile -t modules < <(sed -n '/^replace (/,/^)/p' "${upstream_mod}" | sed -n 's/^[[:space:]]*\(k8s.io\/[a-z0-9-]*\) =>.*/\1/p')
[[ -n "${etcd}" && ${#modules[@]} -gt 0 ]] || { echo "$0: could not read etcd or the staging list" >&2; exit 1; }

mkdir -p "${dir}"
{
    printf 'module github.com/tessera/e2e/cluster/k8s\n\ngo 1.26.0\n\n'
    printf 'require (\n\tgo.etcd.io/etcd/server/v3 %s\n\tk8s.io/kubernetes %s\n)\n\n' "${etcd}" "${version}"
    printf '// k8s.io/kubernetes requires its staging modules at v0.0.0 with local replaces;\n'
    printf '// staging %s is the same source as Kubernetes %s.\nreplace (\n' "${staging}" "${version}"
    for m in "${modules[@]}"; do printf '\t%s => %s %s\n' "${m}" "${m}" "${staging}"; done
    printf ')\n'
} > "${dir}/go.mod"
cat > "${dir}/tools.go" <<'GO'
//go:build tools

// Package tools pins the upstream commands e2e/cluster/build.sh and e2e/realnode/build.sh compile, so
// `go mod tidy` keeps their dependencies in go.mod/go.sum; the kubelet comes from the same release.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
(cd "${dir}" && GOFLAGS=-mod=mod go mod tidy)
echo "${dir}: k8s.io/kubernetes ${version}, etcd ${etcd}, ${#modules[@]} staging modules"
