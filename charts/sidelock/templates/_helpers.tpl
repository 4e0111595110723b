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

{{/*
sidelock.redisSecretCopyNamespaces lists (JSON, sorted, unique) the
namespaces that get a copy of the chart's password Secret, for the sidecars
there (a secretKeyRef reads only its own pod's namespace):
redis.auth.copyTo.namespaces, plus, with copyTo.optedInNamespaces and the
injector's namespace opt-in on, the namespaces labelled for it at this
install or upgrade. Never the release namespace (the Secret itself is there).
*/}}
{{- define "sidelock.redisSecretCopyNamespaces" -}}
{{- $copyTo := .Values.redis.auth.copyTo -}}
{{- $names := $copyTo.namespaces | default list -}}
{{- if and $copyTo.optedInNamespaces .Values.injector.enabled .Values.injector.namespaceOptIn -}}
{{- $names = concat $names (include "sidelock.optedInNamespaces" . | fromJsonArray) -}}
{{- end -}}
{{- without ($names | uniq | sortAlpha) .Release.Namespace | toJson -}}
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
per-pod DNS names of this chart's StatefulSet, or redis.externalAddrs
(empty with redis.externalGroups).
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

{{/*
sidelock.redisGroups renders a list of quorum groups (redis.externalGroups or
redis.previousGroups) in the syntax of SIDELOCK_REDIS_GROUPS:
"east=a:6379,b:6379,c:6379;d:6379,e:6379,f:6379" (a group without a name is
just its addresses; the sidecar names it after them, sorted).
*/}}
{{- define "sidelock.redisGroups" -}}
{{- $groups := list -}}
{{- range . -}}
{{- $addrs := join "," .addrs -}}
{{- $groups = append $groups (ternary (printf "%s=%s" (get . "name") $addrs) $addrs (ne (get . "name") "")) -}}
{{- end -}}
{{- join ";" $groups -}}
{{- end -}}

{{/*
sidelock.groupsByName turns a list of quorum groups into a JSON object
{name: sorted addresses}, naming an unnamed group as the sidecar does (its
addresses, sorted, joined with commas), and fails on what the sidecar
would refuse at start: two groups of one name, a master in two groups.
Call with (dict "groups" <list> "key" <values key, for messages>).
*/}}
{{- define "sidelock.groupsByName" -}}
{{- $byName := dict -}}
{{- $owner := dict -}}
{{- range .groups -}}
{{- $sorted := .addrs | sortAlpha | join "," -}}
{{- $name := get . "name" | default $sorted -}}
{{- if hasKey $byName $name -}}
{{- fail (printf "%s: two groups are named %q" $.key $name) -}}
{{- end -}}
{{- $_ := set $byName $name $sorted -}}
{{- range .addrs -}}
{{- if hasKey $owner . -}}
{{- fail (printf "%s: master %s is in groups %q and %q; the masters of all groups must be independent" $.key . (get $owner .) $name) -}}
{{- end -}}
{{- $_ := set $owner . $name -}}
{{- end -}}
{{- end -}}
{{- toJson $byName -}}
{{- end -}}

{{/*
sidelock.checkRedis fails the render on masters settings that the schema
cannot judge and the sidecar would refuse (it would crash-loop in every
pod): where the masters come from, and a previous group list that
contradicts the current one. Renders nothing.
*/}}
{{- define "sidelock.checkRedis" -}}
{{- $r := .Values.redis -}}
{{- if and $r.externalGroups $r.enabled -}}
{{- fail "redis.externalGroups lists masters you run yourself: set redis.enabled=false (this chart's own masters are one quorum group; to use them as one of several groups, run them in a release of their own and list their addresses here)" -}}
{{- end -}}
{{- if and $r.externalGroups $r.externalAddrs -}}
{{- fail "set redis.externalAddrs (one quorum group) or redis.externalGroups (several), not both" -}}
{{- end -}}
{{- if and $r.auth.enabled $r.auth.existingSecret $r.auth.copyTo.namespaces -}}
{{- fail "redis.auth.copyTo copies the Secret this chart makes; with redis.auth.existingSecret, the Secret is yours: create it under the same name in each namespace of redis.auth.copyTo.namespaces yourself, and leave that list empty" -}}
{{- end -}}
{{- if and (not $r.enabled) $r.auth.enabled (not $r.auth.password) (not $r.auth.existingSecret) -}}
{{- fail "redis.auth.enabled is on (the default) but the external masters have no password: name a Secret holding it (redis.auth.existingSecret) or give it (redis.auth.password); for masters without a password, set redis.auth.enabled=false" -}}
{{- end -}}
{{- $current := include "sidelock.groupsByName" (dict "groups" $r.externalGroups "key" "redis.externalGroups") | fromJson -}}
{{- if not $r.externalGroups -}}
{{- $sorted := include "sidelock.redisAddrs" . | splitList "," | sortAlpha | join "," -}}
{{- $current = dict $sorted $sorted -}}
{{- end -}}
{{- $previous := include "sidelock.groupsByName" (dict "groups" $r.previousGroups "key" "redis.previousGroups") | fromJson -}}
{{- $owner := dict -}}
{{- range $name, $addrs := $current -}}
{{- range splitList "," $addrs -}}
{{- $_ := set $owner . $name -}}
{{- end -}}
{{- end -}}
{{- range $name, $addrs := $previous -}}
{{- if and (hasKey $current $name) (ne (get $current $name) $addrs) -}}
{{- fail (printf "redis.previousGroups: group %q has other masters than in the current list (%s, before %s); a name must keep its masters across a migration" $name (get $current $name) $addrs) -}}
{{- end -}}
{{- range splitList "," $addrs -}}
{{- if and (hasKey $owner .) (ne (get $owner .) $name) -}}
{{- fail (printf "redis.previousGroups: master %s is in group %q now and in group %q before; a master must stay in its group (or leave the list) across a migration" . (get $owner .) $name) -}}
{{- end -}}
{{- end -}}
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

{{/*
sidelock.podLabels: a pod template's labels, the component's podLabels
under its selector labels (which win: a podLabel cannot detach the pods
from their controller or Service). Call with (list <selector labels YAML>
<podLabels>).
*/}}
{{- define "sidelock.podLabels" -}}
{{- $selector := index . 0 | fromYaml -}}
{{- merge $selector (index . 1 | default dict) | toYaml -}}
{{- end -}}

{{/*
sidelock.podScheduling renders the pod spec fields every component takes
from its values: imagePullSecrets (chart-wide), priorityClassName,
nodeSelector, tolerations, affinity and topologySpreadConstraints. The
component's affinity keeps the chart's pod anti-affinity unless it sets a
podAntiAffinity of its own. Call with (dict "root" $ "values" <component
values> "antiAffinity" <the chart's podAntiAffinity, a dict>).
*/}}
{{- define "sidelock.podScheduling" -}}
{{- $v := .values -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $affinity := deepCopy ($v.affinity | default dict) }}
{{- if not (hasKey $affinity "podAntiAffinity") }}
{{- $_ := set $affinity "podAntiAffinity" .antiAffinity }}
{{- end }}
affinity:
  {{- toYaml $affinity | nindent 2 }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
sidelock.redisPassword is the password of this chart's Secret, base64: the
one in the values, else the one the installed Secret holds (read back with
`lookup`, so upgrades keep it), else a new random one. `helm template` and
client dry runs cannot look up, so they always show a new one.
*/}}
{{- define "sidelock.redisPassword" -}}
{{- if .Values.redis.auth.password -}}
{{- .Values.redis.auth.password | b64enc -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "sidelock.redisSecretName" .) -}}
{{- $data := dict -}}
{{- if $existing -}}
{{- $data = $existing.data | default dict -}}
{{- end -}}
{{- index $data "password" | default (randAlphaNum 40 | b64enc) -}}
{{- end -}}
{{- end -}}
