{{/* Names of everything the chart makes: the release's name unless fullnameOverride is set. */}}
{{- define "reconciler.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The label every object carries, and the Deployment's selector. */}}
{{- define "reconciler.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- if .Values.helmLabels }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end -}}

{{/* Helm's standard labels (helmLabels: false keeps only app.kubernetes.io/name). */}}
{{- define "reconciler.labels" -}}
{{ include "reconciler.selectorLabels" . }}
{{- if .Values.helmLabels }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{- define "reconciler.admissionSecret" -}}
{{ include "reconciler.fullname" . }}-admission-tls
{{- end -}}

{{- define "reconciler.admissionConfig" -}}
{{ include "reconciler.fullname" . }}-admission
{{- end -}}

{{/* The Service's DNS name, which the admission certificate names. */}}
{{- define "reconciler.serviceHost" -}}
{{ include "reconciler.fullname" . }}.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* The leader keeps the certificate and caBundle itself (self-issued admission). */}}
{{- define "reconciler.selfSigned" -}}
{{- if and .Values.admission.enabled (not .Values.admission.certManager.enabled) }}true{{ end -}}
{{- end -}}
