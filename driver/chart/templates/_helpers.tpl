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

{{/*
The plugin container's securityContext: the mode's default below, with kubeletPlugin.containerSecurityContext merged
over it (its keys win).
nvml mode: NVML opens /dev/nvidiactl and /dev/nvidia<N>. Kubernetes has no way to grant a container access to host
devices through the device cgroup except `privileged` (the plugin must not get GPUs from the NVIDIA runtime, see
NVIDIA_VISIBLE_DEVICES). Root because the sockets, the checkpoint and the CDI specs go into root-owned host
directories.
simulated mode: no devices, so no privileges and no capabilities. Still uid 0: the sockets, the checkpoint and the CDI
specs go into root-owned host directories (owner permission, no CAP_DAC_OVERRIDE needed).
*/}}
{{- define "vke-gpu-dra.containerSecurityContext" -}}
{{- $default := dict -}}
{{- if eq .Values.deviceSource.type "nvml" -}}
{{- $default = dict "privileged" true "runAsUser" 0 "runAsGroup" 0 "readOnlyRootFilesystem" true -}}
{{- else -}}
{{- $default = dict "privileged" false "allowPrivilegeEscalation" false "runAsUser" 0 "runAsGroup" 0 "runAsNonRoot" false "readOnlyRootFilesystem" true "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $default (deepCopy (.Values.kubeletPlugin.containerSecurityContext | default dict))) -}}
{{- end -}}

{{/* kubeletPlugin.extraEnv must not set a variable the chart sets itself (the plugin's flags). */}}
{{- define "vke-gpu-dra.checkExtraEnv" -}}
{{- $managed := list "NODE_NAME" "DRIVER_NAME" "PLUGIN_DATA_DIR" "REGISTRAR_DIR" "CDI_ROOT" "DEVICE_SOURCE" "NVIDIA_DRIVER_ROOT" "SIMULATED_GPUS" "SIMULATED_PRODUCT" "HEALTHCHECK_PORT" "METRICS_PORT" "CLAIM_RECONCILE_INTERVAL" "LOG_FORMAT" "LOG_LEVEL" "ROLLING_UPDATE_ID" "NVIDIA_VISIBLE_DEVICES" -}}
{{- range .Values.kubeletPlugin.extraEnv -}}
{{- if has .name $managed -}}
{{- fail (printf "kubeletPlugin.extraEnv: %s is set by the chart (use the chart's value for it instead)" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
