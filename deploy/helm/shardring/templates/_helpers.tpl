{{/* Chart name, at most 63 characters. */}}
{{- define "shardring.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects: the release name, plus the chart
name unless the release name already contains it. */}}
{{- define "shardring.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "shardring.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "shardring.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shardring
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "shardring.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardring.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "shardring.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shardring.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The consumer endpoint's Service (routed to the leader only). */}}
{{- define "shardring.endpointServiceName" -}}
{{- printf "%s-endpoint" (include "shardring.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The kubernetes.io/tls Secret mounted as the endpoint's certificate. */}}
{{- define "shardring.endpointTlsSecretName" -}}
{{- default (printf "%s-endpoint-tls" (include "shardring.fullname" .)) .Values.endpoint.tlsSecretName -}}
{{- end -}}
