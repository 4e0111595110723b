{{/*
Shared helpers. They read only .Values, .Chart and .Release, so they work both
with this chart's own context and with `.Subcharts.sidelock` from a parent
chart (see _sidecar.tpl).
*/}}

{{/* Chart name, overridable. */}}
{{- define "sidelock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<name>, or just <release> when it already contains the name. */}}
{{- define "sidelock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "sidelock.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Name of the Redis StatefulSet. At most 52 characters: the StatefulSet
controller appends an 11-character hash to it in a 63-character label.
*/}}
{{- define "sidelock.redisName" -}}
{{- printf "%s-redis" (include "sidelock.fullname" . | trunc 46 | trimSuffix "-") -}}
{{- end -}}

{{/* Headless Service giving each master a stable DNS name. */}}
{{- define "sidelock.redisHeadlessName" -}}
{{- printf "%s-headless" (include "sidelock.redisName" .) -}}
{{- end -}}

{{/* Secret holding the Redis password: the user's, or the one this chart makes. */}}
{{- define "sidelock.redisSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (printf "%s-auth" (include "sidelock.redisName" .)) -}}
{{- end -}}

{{- define "sidelock.redisSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecretKey -}}
{{- else -}}
password
{{- end -}}
{{- end -}}

{{/*
Comma-separated host:port of the masters, for SIDELOCK_REDIS_ADDRS: the
per-pod DNS names of this chart's StatefulSet, or redis.externalAddrs.
*/}}
{{- define "sidelock.redisAddrs" -}}
{{- if .Values.redis.enabled -}}
{{- $sts := include "sidelock.redisName" . -}}
{{- $svc := include "sidelock.redisHeadlessName" . -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.redis.masters) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc.%s:6379" $sts $i $svc $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- else -}}
{{- join "," .Values.redis.externalAddrs -}}
{{- end -}}
{{- end -}}

{{/* Common labels. */}}
{{- define "sidelock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sidelock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sidelock
{{- end -}}

{{- define "sidelock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sidelock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector of the Redis master pods. */}}
{{- define "sidelock.redisSelectorLabels" -}}
{{ include "sidelock.selectorLabels" . }}
app.kubernetes.io/component: redis
{{- end -}}

{{/*
Image reference from an image block: repository@digest when a digest is set,
else repository:tag, the tag defaulting to the given default.
Call with (dict "image" .Values.image "defaultTag" .Chart.AppVersion).
*/}}
{{- define "sidelock.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .defaultTag | toString) -}}
{{- end -}}
{{- end -}}

{{/*
Container securityContext for everything this chart runs: no root, no
privilege escalation, no capabilities, read-only root, default seccomp.
Call with the user id.
*/}}
{{- define "sidelock.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}
