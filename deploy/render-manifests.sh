#!/usr/bin/env bash
# Renders the DeviceClasses from the family registry and the opaque-config policy from the config kinds (into
# deviceclasses/ and the chart's files/), then the chart with default values into deploy/manifests/tessera.yaml
# for users without Helm.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
# the opaque-config policy comes from the config kinds' field tables (dra_driver/core/config_policy.py)
python="${repo}/.venv/bin/python"
[ -x "${python}" ] || python=python3
(cd "${repo}" && "${python}" -m dra_driver.core.config_policy policy) > "${repo}/deviceclasses/opaque-config-policy.yaml.tmp"
mv -f "${repo}/deviceclasses/opaque-config-policy.yaml.tmp" "${repo}/deviceclasses/opaque-config-policy.yaml"
cp "${repo}/deviceclasses/opaque-config-policy.yaml" "${here}/helm/tessera/files/opaque-config-policy.yaml"
# the DeviceClasses and the chart's list of families come from the family registry (dra_driver/core/device_classes.py)
generate() { (cd "${repo}" && "${python}" -m dra_driver.core.device_classes "$@"); }
for name in $(generate list); do
    generate manifest "${name}" > "${repo}/deviceclasses/${name}.tmp"
    mv -f "${repo}/deviceclasses/${name}.tmp" "${repo}/deviceclasses/${name}"
done
generate chart > "${here}/helm/tessera/files/families.yaml.tmp"
mv -f "${here}/helm/tessera/files/families.yaml.tmp" "${here}/helm/tessera/files/families.yaml"
# nodeGroups[]' family settings in the values schema, as the families declare them
schema="${here}/helm/tessera/values.schema.json"
generate schema < "${schema}" > "${schema}.tmp"
mv -f "${schema}.tmp" "${schema}"
helm="$("${here}/helm/build-helm.sh" | tail -n1)"
out="${here}/manifests/tessera.yaml"
{
    echo "# Rendered from deploy/helm/tessera with default values by deploy/render-manifests.sh; do not edit."
    echo "apiVersion: v1"
    echo "kind: Namespace"
    echo "metadata:"
    echo "  name: tessera-system"
    "${helm}" template tessera "${here}/helm/tessera" --namespace tessera-system --kube-version "$(sed "s/^v//" "${repo}/e2e/cluster/k8s/default-version")"
} > "${out}.tmp"
mv -f "${out}.tmp" "${out}"
echo "${out}"
