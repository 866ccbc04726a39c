{{/* Names and labels, as helm create writes them. */}}
{{- define "signagent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "signagent.fullname" -}}
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

{{- define "signagent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "signagent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "signagent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "signagent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "signagent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "signagent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The secrets the agent reads, as a list of {name, ref, what}: each becomes a
Secret volume (one per Secret) and a file under /etc/signagent/secrets/.
*/}}
{{- define "signagent.secretRefs" -}}
{{- $refs := list }}
{{- $refs = append $refs (dict "name" "bearer-token" "ref" .Values.agent.bearerToken "what" "agent.bearerToken") }}
{{- with .Values.agent.tls.clientCA }}{{ if .secretName }}
{{- $refs = append $refs (dict "name" "tls-client-ca" "ref" . "what" "agent.tls.clientCA") }}
{{- end }}{{ end }}
{{- if .Values.oidc.enabled }}
{{- $refs = append $refs (dict "name" "client-secret" "ref" .Values.oidc.clientSecret "what" "oidc.clientSecret") }}
{{- end }}
{{- if .Values.legacy.enabled }}
{{- $refs = append $refs (dict "name" "developer-key" "ref" .Values.legacy.developerKey "what" "legacy.developerKey") }}
{{- range $i, $p := .Values.legacy.passwords }}
{{- $refs = append $refs (dict "name" (printf "password-%d" $i) "ref" $p "what" (printf "legacy.passwords[%d]" $i)) }}
{{- end }}
{{- end }}
{{- if .Values.store.url }}
{{- $refs = append $refs (dict "name" "store-key" "ref" .Values.store.key "what" "store.key") }}
{{- with .Values.store.password }}{{ if .secretName }}
{{- $refs = append $refs (dict "name" "store-password" "ref" . "what" "store.password") }}
{{- end }}{{ end }}
{{- with .Values.store.ca }}{{ if .secretName }}
{{- $refs = append $refs (dict "name" "store-ca" "ref" . "what" "store.ca") }}
{{- end }}{{ end }}
{{- end }}
{{- if .Values.token.enabled }}
{{- $refs = append $refs (dict "name" "pin" "ref" .Values.token.pin "what" "token.pin") }}
{{- $refs = append $refs (dict "name" "api-key" "ref" .Values.token.apiKey "what" "token.apiKey") }}
{{- end }}
{{- toJson $refs }}
{{- end }}

{{/* The file a secret reference is mounted as. */}}
{{- define "signagent.secretFile" -}}
/etc/signagent/secrets/{{ .name }}/{{ required (printf "%s.key is required" .what) .ref.key }}
{{- end }}

{{/*
The image: REGISTRY/REPOSITORY@DIGEST where a digest is given, else
REGISTRY/REPOSITORY:TAG (the tag by default the chart's appVersion, the
release's).
*/}}
{{- define "signagent.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repo }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The helm test's pod (templates/tests/ready.yaml) is rendered: tests.enabled,
and a Service to ask through.
*/}}
{{- define "signagent.testsOn" -}}
{{- if and .Values.tests.enabled .Values.service.enabled }}true{{ end }}
{{- end }}

{{/*
The helm test pod's labels: not the agents' selector labels (the Service
and the NetworkPolicy must not take it for an agent).
*/}}
{{- define "signagent.testLabels" -}}
app.kubernetes.io/name: {{ include "signagent.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end }}
