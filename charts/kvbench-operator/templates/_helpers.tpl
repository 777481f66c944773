{{/* The chart's name: the app.kubernetes.io/name label. */}}
{{- define "kvbench-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the Deployment, its ServiceAccount and its (Cluster)Roles. */}}
{{- define "kvbench-operator.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The operator's image; the tag defaults to the chart's appVersion. */}}
{{- define "kvbench-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "kvbench-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvbench-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kvbench-operator.labels" -}}
{{ include "kvbench-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end }}

{{/*
The namespaces the operator watches when it does not watch them all, as a YAML list:
watch.namespaces, or the release's own namespace when that is empty.
*/}}
{{- define "kvbench-operator.watchedNamespaces" -}}
{{- toYaml (.Values.watch.namespaces | default (list .Release.Namespace)) }}
{{- end }}

{{/*
What the operator does in a namespace it watches (docs/operator.md says why each verb).
A Role in each watched namespace, or a ClusterRole with watch.allNamespaces.
*/}}
{{- define "kvbench-operator.namespacedRules" -}}
- apiGroups: [kvbench.io]
  resources: [benchmarkexperiments]
  verbs: [get, list, watch, patch, update]
- apiGroups: [kvbench.io]
  resources: [benchmarkexperiments/status]
  verbs: [get, patch, update]
- apiGroups: [kvbench.io]
  resources: [benchmarkexperiments/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [statefulsets, deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
