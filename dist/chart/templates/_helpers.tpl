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

{{- define "retry-operator.serviceAccountName" -}}retry-operator-controller-manager{{- end -}}

{{- define "retry-operator.webhookService" -}}retry-operator-webhook-service{{- end -}}

{{- define "retry-operator.certSecret" -}}retry-operator-webhook-server-cert{{- end -}}

{{- define "retry-operator.certMode" -}}
{{- $m := .Values.certificates.mode -}}
{{- if not (has $m (list "cert-manager" "self-signed")) -}}
{{- fail (printf "certificates.mode: %q is not one of cert-manager, self-signed" $m) -}}
{{- end -}}
{{- $m -}}
{{- end -}}
