{{/*
Names and the sidecar spec of the injector (`sidelock injector`), the
mutating admission webhook that adds the sidelock.sidecar container to pods
labelled sidelock.io/inject: "true".
*/}}

{{/* Deployment, Service and ServiceAccount: <fullname>-injector, at most 63 characters. */}}
{{- define "sidelock.injectorName" -}}
{{- printf "%s-injector" (include "sidelock.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/* Secret holding the serving certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "sidelock.injectorTLSSecret" -}}
{{- printf "%s-tls" (include "sidelock.injectorName" .) -}}
{{- end -}}

{{/* The MutatingWebhookConfiguration is cluster-scoped: name it after the namespace too. */}}
{{- define "sidelock.webhookConfigName" -}}
{{- printf "%s-%s" (include "sidelock.injectorName" .) .Release.Namespace -}}
{{- end -}}

{{- define "sidelock.injectorSelectorLabels" -}}
{{ include "sidelock.selectorLabels" . }}
app.kubernetes.io/component: injector
{{- end -}}

{{/* DNS names the API server may use for the injector's Service. */}}
{{- define "sidelock.injectorDNSNames" -}}
{{- $svc := include "sidelock.injectorName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson -}}
{{- end -}}

{{/*
The namespace label that opts every pod of a namespace in
(injector.namespaceOptIn), like istio-injection=enabled: key and value.
*/}}
{{- define "sidelock.namespaceOptInKey" -}}
sidelock-injection
{{- end -}}
{{- define "sidelock.namespaceOptInValue" -}}
enabled
{{- end -}}

{{/*
sidelock.optedInNamespaces lists (JSON, sorted) the namespaces that carry
the opt-in label now, as `lookup` sees them at install or upgrade, less the
excluded ones and those being deleted. `helm template` and client dry runs
cannot look up: there the list is empty.
*/}}
{{- define "sidelock.optedInNamespaces" -}}
{{- $excluded := include "sidelock.injectorExcluded" . | fromJsonArray -}}
{{- $key := include "sidelock.namespaceOptInKey" . -}}
{{- $value := include "sidelock.namespaceOptInValue" . -}}
{{- $names := list -}}
{{- range dig "items" list (lookup "v1" "Namespace" "" "") -}}
{{- $name := dig "metadata" "name" "" . -}}
{{- if and (eq (dig "metadata" "labels" $key "" .) $value) (ne (dig "status" "phase" "" .) "Terminating") (not (has $name $excluded)) -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- end -}}
{{- $names | sortAlpha | toJson -}}
{{- end -}}

{{/* Namespaces never injected: kube-system, always, and injector.excludeNamespaces. */}}
{{- define "sidelock.injectorExcluded" -}}
{{- concat (list "kube-system") .Values.injector.excludeNamespaces | uniq | toJson -}}
{{- end -}}

{{/*
sidelock.injectorSpec is the injector's sidecar spec (JSON, see
internal/injector.Spec): the container that the `sidelock.sidecar` template
renders, so that injected and hand-included sidecars are one and the same.
It is rendered with the readiness probe on; readinessByDefault carries
sidecar.readinessProbe.enabled and the sidelock.io/readiness-probe
annotation overrides it per pod. The named templates read only .Values,
.Chart and .Release.
*/}}
{{- define "sidelock.injectorSpec" -}}
{{- $values := deepCopy .Values -}}
{{- $_ := set $values.sidecar.readinessProbe "enabled" true -}}
{{- $ctx := dict "Values" $values "Chart" .Chart "Release" .Release -}}
{{- $container := include "sidelock.sidecar" $ctx | fromYaml -}}
{{- if hasKey $container "Error" -}}
{{- fail (printf "sidelock.sidecar does not render a container: %s" $container.Error) -}}
{{- end -}}
{{- $spec := dict
  "container" $container
  "readinessByDefault" .Values.sidecar.readinessProbe.enabled
  "volumes" (include "sidelock.volumes" . | fromYamlArray | default list)
  "releaseNamespace" .Release.Namespace -}}
{{- if .Values.sidecar.unixSocket -}}
{{- $_ := set $spec "appVolumeMounts" (include "sidelock.appVolumeMounts" . | fromYamlArray) -}}
{{- $_ := set $spec "appEnv" (include "sidelock.appEnv" . | fromYamlArray) -}}
{{- end -}}
{{- $spec | toPrettyJson -}}
{{- end -}}
