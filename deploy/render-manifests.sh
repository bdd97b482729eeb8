#!/usr/bin/env bash
# Renders the chart with default values into deploy/manifests/tessera.yaml for users without Helm.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
helm="$("${here}/helm/build-helm.sh" | tail -n1)"
out="${here}/manifests/tessera.yaml"
{
    echo "# Rendered from deploy/helm/tessera with default values by deploy/render-manifests.sh; do not edit."
    echo "apiVersion: v1"
    echo "kind: Namespace"
    echo "metadata:"
    echo "  name: tessera-system"
    "${helm}" template tessera "${here}/helm/tessera" --namespace tessera-system --kube-version 1.36.3
} > "${out}.tmp"
mv -f "${out}.tmp" "${out}"
echo "${out}"
