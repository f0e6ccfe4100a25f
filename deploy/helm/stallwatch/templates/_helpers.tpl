{{/*
Names and labels, as `helm create` makes them: the release "stallwatch" (or any name that
contains it) gives objects named stallwatch, like deploy/kubernetes/base.
*/}}
{{- define "stallwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stallwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stallwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
app.kubernetes.io/name is also the ServiceMonitor's jobLabel: the alerts expect
job="stallwatch", so nameOverride changes the job too.
*/}}
{{- define "stallwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stallwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stallwatch.labels" -}}
helm.sh/chart: {{ include "stallwatch.chart" . }}
{{ include "stallwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "stallwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stallwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the existing service account to use when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stallwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
