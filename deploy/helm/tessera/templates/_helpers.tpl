{{- define "tessera.labels" -}}
app.kubernetes.io/name: tessera
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tessera
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tessera.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "tessera.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.name }}
{{- end -}}

{{/* Where the plugin's sockets and files are on the host: the hostPaths, mounted in place. */}}
{{- define "tessera.pathArgs" -}}
- --kubelet-plugins-dir={{ .Values.hostPaths.kubeletPlugins }}
- --kubelet-registry-dir={{ .Values.hostPaths.kubeletRegistry }}
- --cdi-dir={{ .Values.hostPaths.cdi }}
- --claims-dir={{ .Values.hostPaths.claims }}
- --gpus-dir={{ .Values.hostPaths.gpus }}
{{- end -}}

{{/* The probe finds the sockets with the same directories (a JSON list tail for an exec command). */}}
{{- define "tessera.probePathArgs" -}}
"--kubelet-plugins-dir={{ .Values.hostPaths.kubeletPlugins }}", "--kubelet-registry-dir={{ .Values.hostPaths.kubeletRegistry }}"
{{- end -}}

{{/* The family registry's names, "gpu, vgpu, mps, mig": files/families.yaml is generated from it
(deploy/render-manifests.sh). */}}
{{- define "tessera.familyNames" -}}
{{- $names := list }}
{{- range (.Files.Get "files/families.yaml" | fromYaml).families }}
{{- $names = append $names .name }}
{{- end }}
{{- join ", " $names }}
{{- end }}
