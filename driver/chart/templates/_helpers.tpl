{{/* Chart name, overridable with nameOverride. */}}
{{- define "vke-gpu-dra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Object-name prefix derived from the release: fullnameOverride, else <release> when it already contains the
chart name, else <release>-<chart name>. Truncated so that suffixed names stay within 63 characters.
*/}}
{{- define "vke-gpu-dra.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vke-gpu-dra.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Recommended labels. Call with (dict "ctx" $ "component" "<component>").
*/}}
{{- define "vke-gpu-dra.labels" -}}
{{- $ctx := .ctx -}}
helm.sh/chart: {{ include "vke-gpu-dra.chart" $ctx }}
{{ include "vke-gpu-dra.selectorLabels" . }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: vke-gpu-dra
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
{{- end -}}

{{/* Immutable subset of the labels, used in selectors. Same argument as vke-gpu-dra.labels. */}}
{{- define "vke-gpu-dra.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vke-gpu-dra.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Name of the plugin's ServiceAccount. */}}
{{- define "vke-gpu-dra.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-kubelet-plugin" (include "vke-gpu-dra.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Plugin image reference: repository@digest when a digest is set, else repository:tag (default appVersion). */}}
{{- define "vke-gpu-dra.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The plugin's data directory (dra.sock, checkpoint): <kubeletPluginsDir>/<driverName>. */}}
{{- define "vke-gpu-dra.pluginDataDir" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.kubeletPluginsDir) .Values.driverName -}}
{{- end -}}

{{/*
Where the host's NVIDIA driver root appears in the container: /driver-root when the host root is "/" (the host's
whole filesystem cannot be mounted over the container's), otherwise the same path as on the host.
*/}}
{{- define "vke-gpu-dra.driverRootCtrPath" -}}
{{- $root := .Values.nvidiaDriverRoot | trimSuffix "/" -}}
{{- if eq $root "" -}}/driver-root{{- else -}}{{ $root }}{{- end -}}
{{- end -}}

{{/*
CEL selecting this driver's devices whose `type` attribute equals the given type (NVIDIA's exact form).
Call with (dict "driver" .Values.driverName "type" "gpu").
*/}}
{{- define "vke-gpu-dra.deviceTypeSelector" -}}
{{- printf "device.driver == '%s' && device.attributes['%s'].type == '%s'" .driver .driver .type -}}
{{- end -}}
