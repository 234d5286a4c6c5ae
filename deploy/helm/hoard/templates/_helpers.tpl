{{/* The release's full name, at most 52 characters (suffixes follow). */}}
{{- define "hoard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hoard.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "hoard.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hoard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "hoard.workerImage" -}}
{{ .Values.image.workerRepository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "hoard.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "hoard.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{- define "hoard.tokensSecret" -}}
{{ .Values.tokens.existingSecret | default (printf "%s-tokens" (include "hoard.fullname" .)) }}
{{- end -}}

{{/* etcd's client URLs, comma-separated. */}}
{{- define "hoard.etcdEndpoints" -}}
{{- if .Values.etcd.deploy -}}
{{- $scheme := ternary "https" "http" .Values.tls.enabled -}}
{{ $scheme }}://{{ include "hoard.fullname" . }}-etcd.{{ .Release.Namespace }}.svc:2379
{{- else -}}
{{ required "etcd.endpoints is required with etcd.deploy=false" .Values.etcd.endpoints | join "," }}
{{- end -}}
{{- end -}}

{{/*
The pods' security context: hoard's uid, and fsGroup so that the
mounted Secrets (mode 0440, group hoard) are readable to the init
container that copies them, owner-only, into memory (hoard refuses a
secret file others could read).
*/}}
{{- define "hoard.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "hoard.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/*
The init container that turns the mounted Secrets (/secrets-in/NAME/KEY)
into the owner-only files hoard reads (/run/hoard/...): .script is the
shell script, run by dash from the worker image, as hoard's uid or,
with .root, as root (for the agent). A value holding a quote
or a backslash is refused (the JSON is written by printf).
*/}}
{{- define "hoard.secretsInit" -}}
- name: secrets
  image: {{ include "hoard.workerImage" .ctx }}
  imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
  command: ["/bin/sh", "-euc"]
  args:
    - |
      umask 077
      v() { x=$(cat "/secrets-in/$1"); case "$x" in *'"'*|*'\'*) echo "secrets: $1 holds a quote or a backslash" >&2; exit 1;; esac; printf '%s' "$x"; }
      {{- .script | nindent 6 }}
  securityContext:
    {{- include "hoard.containerSecurity" .ctx | nindent 4 }}
    {{- if .root }}
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: 0
    {{- end }}
  volumeMounts:
    - {name: secrets-in, mountPath: /secrets-in, readOnly: true}
    - {name: run, mountPath: /run/hoard}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
{{- end -}}

{{- define "hoard.metricsAnnotations" -}}
{{- if .ctx.Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- if .https }}
prometheus.io/scheme: https
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secrets of etcd's root and of the agents' shared user. */}}
{{- define "hoard.etcdRootSecret" -}}
{{ .Values.etcd.credentialsSecret | default (printf "%s-etcd-root" (include "hoard.fullname" .)) }}
{{- end -}}

{{- define "hoard.etcdAgentsSecret" -}}
{{- if and (not .Values.etcd.auth.enabled) (not .Values.etcd.agentCredentialsSecret) -}}
{{- fail "etcd.agentCredentialsSecret is required with etcd.auth.enabled=false (the operator's etcd user for the agents)" -}}
{{- end -}}
{{ .Values.etcd.agentCredentialsSecret | default (printf "%s-etcd-agents" (include "hoard.fullname" .)) }}
{{- end -}}

{{/*
The Secrets of TLS (tls.enabled): each the operator's, or the one
cert-manager fills when tls.certManager.issuer is set. A name left empty
without an issuer is an error naming the value.
*/}}
{{- define "hoard.tlsSecret" -}}
{{- $v := index .ctx.Values.tls .value -}}
{{- if $v -}}
{{ $v }}
{{- else if .ctx.Values.tls.certManager.issuer -}}
{{ printf "%s-%s-tls" (include "hoard.fullname" .ctx) .suffix }}
{{- else -}}
{{- fail (printf "tls.%s (a Secret of type kubernetes.io/tls) or tls.certManager.issuer is required with tls.enabled" .value) -}}
{{- end -}}
{{- end -}}
