{{/*
sidelock.sidecar renders the sidelock container (one list item's content,
without the leading "- ") for a pod's initContainers. It is a *native
sidecar* (restartPolicy: Always, Kubernetes >= 1.29): it starts before the
application containers, the kubelet waits for its startupProbe before
starting them, it keeps running alongside them, and it is stopped after them.

Context: this chart's context. In this chart that is `.`; in a parent chart
that depends on sidelock it is `.Subcharts.sidelock`, so that names and values
resolve exactly as they do for the Redis masters of the same release:

  initContainers:
    - {{- include "sidelock.sidecar" .Subcharts.sidelock | nindent 6 }}

Probes all hit the admin port (never the lock API, which listens on loopback
only and is not a containerPort). Liveness uses /healthz, which never depends
on Redis: a Redis outage must not restart every sidecar in the cluster.
Readiness uses /readyz (quorum of masters; with several quorum groups, of
all or any of them, sidecar.config.readyPolicy) and, the sidecar being native,
counts toward the pod's readiness: losing quorum takes the pod out of its
Services. sidecar.readinessProbe.enabled=false keeps such pods in rotation.
*/}}
{{- define "sidelock.sidecar" -}}
{{- $sc := .Values.sidecar -}}
name: {{ $sc.name }}
image: {{ include "sidelock.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
restartPolicy: Always
ports:
  - name: sidelock-admin
    containerPort: {{ $sc.adminPort }}
    protocol: TCP
env:
  {{- include "sidelock.sidecarEnv" . | nindent 2 }}
startupProbe:
  {{- include "sidelock.adminProbe" (dict "path" "/healthz" "timing" $sc.startupProbe) | nindent 2 }}
{{- if $sc.readinessProbe.enabled }}
readinessProbe:
  {{- include "sidelock.adminProbe" (dict "path" "/readyz" "timing" $sc.readinessProbe) | nindent 2 }}
{{- end }}
livenessProbe:
  {{- include "sidelock.adminProbe" (dict "path" "/healthz" "timing" $sc.livenessProbe) | nindent 2 }}
resources:
  {{- toYaml $sc.resources | nindent 2 }}
securityContext:
  {{- include "sidelock.containerSecurityContext" 65532 | nindent 2 }}
{{- if or $sc.unixSocket $sc.extraVolumeMounts }}
volumeMounts:
  {{- include "sidelock.appVolumeMounts" . | nindent 2 }}
  {{- with $sc.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* An httpGet probe on the admin port; timing is a probe block of values. */}}
{{- define "sidelock.adminProbe" -}}
httpGet:
  path: {{ .path }}
  port: sidelock-admin
{{ omit .timing "enabled" | toYaml }}
{{- end -}}

{{/*
Environment of the sidecar. Listen addresses come from the same values as the
port and probes so they cannot drift apart; the lock API stays on loopback.
*/}}
{{- define "sidelock.sidecarEnv" -}}
{{- $sc := .Values.sidecar -}}
{{- $redis := .Values.redis -}}
- name: SIDELOCK_LISTEN_ADDR
  value: {{ include "sidelock.apiAddr" . | quote }}
- name: SIDELOCK_ADMIN_ADDR
  value: {{ printf ":%d" (int $sc.adminPort) | quote }}
{{- include "sidelock.checkRedis" . }}
{{- if $redis.externalGroups }}
- name: SIDELOCK_REDIS_GROUPS
  value: {{ include "sidelock.redisGroups" $redis.externalGroups | quote }}
{{- else }}
- name: SIDELOCK_REDIS_ADDRS
  value: {{ include "sidelock.redisAddrs" . | quote }}
{{- end }}
{{- with $redis.previousGroups }}
- name: SIDELOCK_REDIS_GROUPS_PREVIOUS
  value: {{ include "sidelock.redisGroups" . | quote }}
{{- end }}
{{- /* sidecar.config key -> variable; ranged in key order, so output is stable. */}}
{{- $vars := dict
  "keyPrefix" "SIDELOCK_KEY_PREFIX"
  "nodeTimeout" "SIDELOCK_NODE_TIMEOUT"
  "driftFactor" "SIDELOCK_DRIFT_FACTOR"
  "defaultTTL" "SIDELOCK_DEFAULT_TTL"
  "maxTTL" "SIDELOCK_MAX_TTL"
  "keyTTL" "SIDELOCK_KEY_TTL"
  "maxWait" "SIDELOCK_MAX_WAIT"
  "noQuorumRetry" "SIDELOCK_NO_QUORUM_RETRY"
  "maxHold" "SIDELOCK_MAX_HOLD"
  "restartGuard" "SIDELOCK_RESTART_GUARD"
  "mastersPersistent" "SIDELOCK_MASTERS_PERSISTENT"
  "fencing" "SIDELOCK_FENCING"
  "fenceRetention" "SIDELOCK_FENCE_RETENTION"
  "fenceBlock" "SIDELOCK_FENCE_BLOCK"
  "linger" "SIDELOCK_LINGER"
  "waiterMarks" "SIDELOCK_WAITER_MARKS"
  "healthInterval" "SIDELOCK_HEALTH_INTERVAL"
  "healthInfoMaxAge" "SIDELOCK_HEALTH_INFO_MAX_AGE"
  "healthDownAfter" "SIDELOCK_HEALTH_DOWN_AFTER"
  "shutdownTimeout" "SIDELOCK_SHUTDOWN_TIMEOUT"
  "logFormat" "SIDELOCK_LOG_FORMAT"
  "logLevel" "SIDELOCK_LOG_LEVEL"
  "readyPolicy" "SIDELOCK_READY_POLICY" }}
{{- range $key, $var := $vars }}
- name: {{ $var }}
  value: {{ index $sc.config $key | toString | quote }}
{{- end }}
{{- /* Integers: int64 first, or YAML's float64 would print 1e+06. */}}
{{- range $key, $var := dict "maxLocks" "SIDELOCK_MAX_LOCKS" "maxWaiters" "SIDELOCK_MAX_WAITERS" "maxWaitersPerName" "SIDELOCK_MAX_WAITERS_PER_NAME" "maxWatchers" "SIDELOCK_MAX_WATCHERS" "maxConns" "SIDELOCK_MAX_CONNS" "redisMaxConns" "SIDELOCK_REDIS_MAX_CONNS" }}
- name: {{ $var }}
  value: {{ index $sc.config $key | int64 | toString | quote }}
{{- end }}
{{- with $sc.apiToken.existingSecret }}
- name: SIDELOCK_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $sc.apiToken.key }}
{{- end }}
{{- if $redis.tls.enabled }}
- name: SIDELOCK_REDIS_TLS
  value: "true"
{{- range $key, $var := dict "caFile" "SIDELOCK_REDIS_TLS_CA_FILE" "certFile" "SIDELOCK_REDIS_TLS_CERT_FILE" "keyFile" "SIDELOCK_REDIS_TLS_KEY_FILE" }}
{{- with index $redis.tls $key }}
- name: {{ $var }}
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if $redis.auth.enabled }}
{{- with $redis.auth.username }}
- name: SIDELOCK_REDIS_USERNAME
  value: {{ . | quote }}
{{- end }}
- name: SIDELOCK_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "sidelock.redisSecretName" . }}
      key: {{ include "sidelock.redisSecretKey" . }}
{{- end }}
{{- end -}}

{{/*
sidelock.volumes renders sidecar.extraVolumes as pod volumes (list items),
for the pod that includes the sidecar; empty when there are none:

  volumes:
    {{- include "sidelock.volumes" .Subcharts.sidelock | nindent 4 }}
*/}}
{{- define "sidelock.volumes" -}}
{{- $volumes := list }}
{{- if .Values.sidecar.unixSocket }}
{{- $volumes = append $volumes (dict "name" "sidelock-socket" "emptyDir" dict) }}
{{- end }}
{{- with concat $volumes (.Values.sidecar.extraVolumes | default list) }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/*
sidelock.apiAddr is the sidecar's SIDELOCK_LISTEN_ADDR: 127.0.0.1:listenPort,
or its Unix socket (sidecar.unixSocket) in the sidelock-socket volume.
*/}}
{{- define "sidelock.apiAddr" -}}
{{- if .Values.sidecar.unixSocket -}}
unix:///run/sidelock/api.sock
{{- else -}}
{{ printf "127.0.0.1:%d" (int .Values.sidecar.listenPort) }}
{{- end -}}
{{- end -}}

{{/*
With sidecar.unixSocket, what an application container needs to reach the
lock API (list items; empty otherwise): the socket's volume, mounted as in
the sidecar,

  volumeMounts:
    {{- include "sidelock.appVolumeMounts" .Subcharts.sidelock | nindent 4 }}

and SIDELOCK_ADDR for `sidelock exec|lock|status|watch`:

  env:
    {{- include "sidelock.appEnv" .Subcharts.sidelock | nindent 4 }}

The injector adds both to every container of the pods it injects.
*/}}
{{- define "sidelock.appVolumeMounts" -}}
{{- if .Values.sidecar.unixSocket }}
- name: sidelock-socket
  mountPath: /run/sidelock
{{- end }}
{{- end -}}

{{- define "sidelock.appEnv" -}}
{{- if .Values.sidecar.unixSocket }}
- name: SIDELOCK_ADDR
  value: {{ include "sidelock.apiAddr" . | quote }}
{{- end }}
{{- end -}}
