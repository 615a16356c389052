{{/*
Chart name, truncated to 63 characters.
*/}}
{{- define "webchecker-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or <release> when it already contains the chart name.
*/}}
{{- define "webchecker-operator.fullname" -}}
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

{{/*
Chart label value.
*/}}
{{- define "webchecker-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "webchecker-operator.labels" -}}
helm.sh/chart: {{ include "webchecker-operator.chart" . }}
{{ include "webchecker-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: webchecker-operator
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "webchecker-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webchecker-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount.
*/}}
{{- define "webchecker-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "webchecker-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image repository, which has no default: nothing is published, and a bare
name would be pulled from Docker Hub.
*/}}
{{- define "webchecker-operator.repository" -}}
{{- if not .Values.image.repository }}
{{- fail "image.repository is not set: name the image you pushed, e.g. --set image.repository=registry.example.com/team/webchecker-operator after make push REGISTRY=registry.example.com/team (README: Install); for an image loaded into kind or k3d: --set image.repository=webchecker-operator --set image.pullPolicy=Never" }}
{{- end }}
{{- .Values.image.repository }}
{{- end }}

{{/*
Container image reference: repository@digest, or repository:tag (tag defaults to appVersion).
*/}}
{{- define "webchecker-operator.image" -}}
{{- $repo := include "webchecker-operator.repository" . }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The helm test pod's image: tests.image.repository, or the operator's
repository with -chart-test appended (make push pushes both there).
*/}}
{{- define "webchecker-operator.testImage" -}}
{{- $repo := .Values.tests.image.repository | default (printf "%s-chart-test" (include "webchecker-operator.repository" .)) }}
{{- printf "%s:%s" $repo (default (default .Chart.AppVersion .Values.image.tag) .Values.tests.image.tag) }}
{{- end }}

{{/*
Where the caBundle volume is mounted, and the file the operator reads
(--ca-bundle): the key is always mounted as ca.crt.
*/}}
{{- define "webchecker-operator.caBundleDir" -}}
/etc/webchecker-ca
{{- end }}

{{- define "webchecker-operator.caBundleFile" -}}
{{ include "webchecker-operator.caBundleDir" . }}/ca.crt
{{- end }}

{{/*
A duration (500ms, 10s, 5m) in milliseconds, as a string.
Argument: dict "name" <value path for messages> "value" <duration>.
Fails with a clear message when the value is not such a duration (the schema
already rejects it, but this also holds with --skip-schema-validation).
*/}}
{{- define "webchecker-operator.durationMillis" -}}
{{- $d := toString .value }}
{{- if not (regexMatch "^[0-9]+(ms|s|m)$" $d) }}
{{- fail (printf "%s: %q is not a duration; use an integer with unit ms, s or m (e.g. 500ms, 10s, 5m)" .name $d) }}
{{- end }}
{{- /* strip leading zeros: int64 would read "010" as octal */}}
{{- $n := regexReplaceAll "^0+([0-9])" (regexFind "^[0-9]+" $d) "${1}" | int64 }}
{{- $unit := regexFind "(ms|s|m)$" $d }}
{{- if eq $unit "ms" }}
{{- $n }}
{{- else if eq $unit "s" }}
{{- mul $n 1000 }}
{{- else }}
{{- mul $n 60000 }}
{{- end }}
{{- end }}

{{/*
Cross-field checks the JSON schema cannot express. Renders nothing.
*/}}
{{- define "webchecker-operator.validate" -}}
{{- $op := .Values.operator }}
{{- $shutdown := include "webchecker-operator.durationMillis" (dict "name" "operator.shutdownTimeout" "value" $op.shutdownTimeout) | int64 }}
{{- $lease := include "webchecker-operator.durationMillis" (dict "name" "operator.leaseDuration" "value" $op.leaseDuration) | int64 }}
{{- $renew := include "webchecker-operator.durationMillis" (dict "name" "operator.renewDeadline" "value" $op.renewDeadline) | int64 }}
{{- $retry := include "webchecker-operator.durationMillis" (dict "name" "operator.retryPeriod" "value" $op.retryPeriod) | int64 }}
{{- $_ := include "webchecker-operator.durationMillis" (dict "name" "operator.heartbeat" "value" $op.heartbeat) }}
{{- $grace := .Values.terminationGracePeriodSeconds | int64 }}
{{- if ge $shutdown (mul $grace 1000) }}
{{- fail (printf "operator.shutdownTimeout (%s) must be shorter than terminationGracePeriodSeconds (%ds), otherwise the kubelet kills the operator before its graceful shutdown ends; raise terminationGracePeriodSeconds or lower operator.shutdownTimeout" (toString $op.shutdownTimeout) $grace) }}
{{- end }}
{{- if le $lease $renew }}
{{- fail (printf "operator.leaseDuration (%s) must be longer than operator.renewDeadline (%s)" (toString $op.leaseDuration) (toString $op.renewDeadline)) }}
{{- end }}
{{- /* the operator refuses renewDeadline <= 1.2 x retryPeriod (src/config.rs) */}}
{{- if le (mul $renew 5) (mul $retry 6) }}
{{- fail (printf "operator.renewDeadline (%s) must be longer than 1.2 x operator.retryPeriod (%s), otherwise the operator refuses to start" (toString $op.renewDeadline) (toString $op.retryPeriod)) }}
{{- end }}
{{- if le $retry 0 }}
{{- fail "operator.retryPeriod must be greater than 0" }}
{{- end }}
{{- if lt $lease 1000 }}
{{- fail (printf "operator.leaseDuration (%s) must be at least 1s (Leases count whole seconds)" (toString $op.leaseDuration)) }}
{{- end }}
{{- if eq ($op.metricsPort | int64) ($op.confirmPort | int64) }}
{{- fail (printf "operator.confirmPort (%d) must differ from operator.metricsPort: asks to confirm a failure have a port of their own, which the NetworkPolicy opens to the release's pods only" ($op.confirmPort | int64)) }}
{{- end }}
{{- if and .Values.caBundle.configMap .Values.caBundle.secret }}
{{- fail (printf "caBundle: set configMap (%q) or secret (%q), not both" .Values.caBundle.configMap .Values.caBundle.secret) }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: enable one of them, otherwise Prometheus scrapes every replica twice (duplicate series)" }}
{{- end }}
{{- range $m := list "serviceMonitor" "podMonitor" }}
{{- if and (index $.Values $m).nativeHistograms (not $.Values.operator.nativeHistograms) }}
{{- fail (printf "%s.nativeHistograms needs operator.nativeHistograms: true (the operator serves native histograms only then)" $m) }}
{{- end }}
{{- end }}
{{- if and (eq (toString .Values.dnsPolicy) "None") (not (.Values.dnsConfig | default dict).nameservers) }}
{{- fail "dnsPolicy None: set dnsConfig.nameservers, the pod has no name server otherwise (the API server refuses it)" }}
{{- end }}
{{- /* the API server refuses two spread constraints with the same topologyKey and whenUnsatisfiable */}}
{{- $spread := list }}
{{- $ts := .Values.topologySpread }}
{{- if $ts.enabled }}
{{- $spread = append $spread (printf "%s %s" (toString $ts.topologyKey) (toString $ts.whenUnsatisfiable)) }}
{{- with $ts.zoneTopologyKey }}
{{- $when := $ts.zoneWhenUnsatisfiable | default "ScheduleAnyway" }}
{{- if has (printf "%s %s" . $when) $spread }}
{{- fail (printf "topologySpread.zoneTopologyKey %q repeats topologySpread.topologyKey with whenUnsatisfiable %s; empty zoneTopologyKey or choose another key" . $when) }}
{{- end }}
{{- $spread = append $spread (printf "%s %s" . $when) }}
{{- end }}
{{- end }}
{{- range $i, $c := .Values.extraTopologySpreadConstraints }}
{{- $pair := printf "%s %s" (toString $c.topologyKey) (toString $c.whenUnsatisfiable) }}
{{- if has $pair $spread }}
{{- fail (printf "extraTopologySpreadConstraints[%d]: topologyKey %q with whenUnsatisfiable %s is already a constraint (the chart spreads over topologySpread.topologyKey and topologySpread.zoneTopologyKey); remove it (or empty topologySpread.zoneTopologyKey)" $i (toString $c.topologyKey) (toString $c.whenUnsatisfiable)) }}
{{- end }}
{{- $spread = append $spread $pair }}
{{- end }}
{{- range $i, $v := .Values.extraVolumes }}
{{- if has (toString $v.name) (list "tmp" "ca-bundle") }}
{{- fail (printf "extraVolumes[%d]: the name %q is the chart's own volume; choose another" $i (toString $v.name)) }}
{{- end }}
{{- end }}
{{- range $i, $m := .Values.extraVolumeMounts }}
{{- if or (eq (toString $m.mountPath) "/tmp") (eq (toString $m.mountPath) (include "webchecker-operator.caBundleDir" $)) }}
{{- fail (printf "extraVolumeMounts[%d]: %q is mounted by the chart; choose another mountPath" $i (toString $m.mountPath)) }}
{{- end }}
{{- end }}
{{- $cidr := `^(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])|([0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{0,4}/(12[0-8]|1[01][0-9]|[1-9]?[0-9])|([0-9a-fA-F]{0,4}:){2,6}((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))$` }}
{{- range $list := list "denyCidrs" "allowCidrs" "privateCidrs" }}
{{- range $i, $c := (index $op $list | default list) }}
{{- if not (regexMatch $cidr (toString $c)) }}
{{- fail (printf "operator.%s[%d]: %q is not a network in CIDR notation (address/prefix length, e.g. 10.0.0.0/8 or fd00::/8)" $list $i (toString $c)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
What a diagnosis reads (rbac.diagnose): the target's objects, read only.
*/}}
{{- define "webchecker-operator.diagnosisRules" -}}
# Diagnosis of failing checkers (rbac.diagnose): their targets' objects.
- apiGroups: [""]
  resources: ["services", "pods"]
  verbs: ["get", "list"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes", "grpcroutes", "gateways"]
  verbs: ["get"]
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["list"]
{{- end }}
