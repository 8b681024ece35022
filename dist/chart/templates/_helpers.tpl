{{/*
Every object is named retry-operator-*: the CRD and the webhook
configurations are cluster-wide, so one release per cluster.
*/}}
{{- define "retry-operator.name" -}}retry-operator{{- end -}}

{{- define "retry-operator.labels" -}}
app.kubernetes.io/name: retry-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "retry-operator.selectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/name: retry-operator
{{- end -}}

{{- define "retry-operator.serviceAccountName" -}}
{{- default "retry-operator-controller-manager" .Values.serviceAccount.name -}}
{{- end -}}

{{/*
An image reference from image.manager or image.sidecar: repository@digest
when a digest is set, else repository:tag, the tag defaulting to appVersion.
Call with (list $ .Values.image.manager).
*/}}
{{- define "retry-operator.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "retry-operator.webhookService" -}}retry-operator-webhook-service{{- end -}}

{{- define "retry-operator.certSecret" -}}retry-operator-webhook-server-cert{{- end -}}

{{- define "retry-operator.certMode" -}}
{{- $m := .Values.certificates.mode -}}
{{- if not (has $m (list "cert-manager" "self-signed")) -}}
{{- fail (printf "certificates.mode: %q is not one of cert-manager, self-signed" $m) -}}
{{- end -}}
{{- $m -}}
{{- end -}}
