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

{{/* Plugin image reference; the tag defaults to the chart's appVersion. */}}
{{- define "vke-gpu-dra.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The plugin's data directory (dra.sock, checkpoint): <kubeletPluginsDir>/<driverName>. */}}
{{- define "vke-gpu-dra.pluginDataDir" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.kubeletPluginsDir) .Values.driverName -}}
{{- end -}}

{{/*
Where the host's NVIDIA driver root appears in the plugin container (NVIDIA's chart uses the same path). The plugin
reads the driver there and writes host paths (nvidiaDriverRoot + path) into the CDI specs.
*/}}
{{- define "vke-gpu-dra.driverRootCtrPath" -}}
/driver-root
{{- end -}}

{{/*
CEL selecting this driver's devices whose `type` attribute equals the given type (NVIDIA's exact form).
Call with (dict "driver" .Values.driverName "type" "gpu").
*/}}
{{- define "vke-gpu-dra.deviceTypeSelector" -}}
{{- printf "device.driver == '%s' && device.attributes['%s'].type == '%s'" .driver .driver .type -}}
{{- end -}}
