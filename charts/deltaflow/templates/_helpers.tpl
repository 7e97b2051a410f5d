{{- /* Names of the operator's objects. Namespaced ones could share a name across releases; the
cluster-scoped ones (ClusterRoles, their bindings) cannot, so every name carries the release:
release "deltaflow" gives "deltaflow-operator", release "team-a" gives "team-a-deltaflow-operator". */ -}}
{{- define "deltaflow.name" -}}
{{- if contains "deltaflow" .Release.Name -}}
{{- printf "%s-operator" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-deltaflow-operator" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- define "deltaflow.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "deltaflow.labels" -}}
app.kubernetes.io/name: deltaflow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "deltaflow.selector" -}}
app.kubernetes.io/name: deltaflow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}
