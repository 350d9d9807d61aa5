{{/* Names: <release> if it already contains the chart name, else <release>-halo; 63 characters at most (DNS labels). */}}
{{- define "halo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "halo.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "halo.labels" -}}
{{ include "halo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "halo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The device, checked: a typo must not silently deploy on cpu. */}}
{{- define "halo.device" -}}
{{- $d := required "device.type is required (cpu, cuda or rbln)" .Values.device.type -}}
{{- if not (has $d (list "cpu" "cuda" "rbln")) -}}
{{- fail (printf "device.type must be cpu, cuda or rbln, not %q" $d) -}}
{{- end -}}
{{- $d -}}
{{- end -}}

{{/* The extended resource of the device; empty for cpu. */}}
{{- define "halo.deviceResource" -}}
{{- $d := include "halo.device" . -}}
{{- if eq $d "cuda" -}}
{{- .Values.device.resourceName | default "nvidia.com/gpu" -}}
{{- else if eq $d "rbln" -}}
{{- .Values.device.resourceName | default "rebellions.ai/ATOM" -}}
{{- end -}}
{{- end -}}

{{/* Where the model is read from; the embedded one lives in the image's install tree. */}}
{{- define "halo.modelSource" -}}
{{- .Values.model | default "/usr/local/share/halo/models/pkgchat-5m" -}}
{{- end -}}

{{- define "halo.servedModelName" -}}
{{- .Values.servedModelName | default .Values.model | default "pkgchat-5m" -}}
{{- end -}}

{{/* vLLM's KVEventsConfig as JSON (--kv-events-config). */}}
{{- define "halo.kvEventsConfig" -}}
{{- $topic := .Values.kvEvents.topic | default (printf "kv@$(POD_IP)@%s" (include "halo.servedModelName" .)) -}}
{{- $cfg := dict "enable_kv_cache_events" true "publisher" "zmq" "endpoint" .Values.kvEvents.endpoint "topic" $topic -}}
{{- if .Values.kvEvents.replayEndpoint -}}
{{- $_ := set $cfg "replay_endpoint" .Values.kvEvents.replayEndpoint -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{- define "halo.terminationGracePeriodSeconds" -}}
{{- add (ceil .Values.shutdown.delaySeconds) (ceil .Values.shutdown.timeoutSeconds) .Values.shutdown.graceMarginSeconds -}}
{{- end -}}
