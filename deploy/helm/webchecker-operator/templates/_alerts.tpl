{{/*
Adapts one alerting rule of files/alerts.yaml in place (dicts are shared, the
output is empty): prometheusRule.alerts.<name> (severity, for, thresholds,
additionalRuleLabels; `for` of an alert with a `# threshold: forSeconds` line
goes into that threshold, in seconds), prometheusRule.additionalRuleLabels and
prometheusRule.runbookBaseUrl. Argument: dict rule, o (the alert's overrides),
pr (.Values.prometheusRule).
*/}}
{{- define "webchecker-operator.adaptAlert" -}}
{{- $r := .rule }}
{{- $o := .o }}
{{- $name := $r.alert }}
{{- $thresholds := deepCopy ($o.thresholds | default dict) }}
{{- if hasKey $o "for" }}
{{- if regexMatch "(?m)# threshold: forSeconds *$" $r.expr }}
{{- /* The alert measures its wait in its expression, in seconds: `for` sets that threshold. */}}
{{- if hasKey $thresholds "forSeconds" }}
{{- fail (printf "prometheusRule.alerts.%s: set for or thresholds.forSeconds, not both" $name) }}
{{- end }}
{{- $_ := set $thresholds "forSeconds" (include "webchecker-operator.durationSeconds" (dict "d" $o.for "what" (printf "prometheusRule.alerts.%s.for" $name))) }}
{{- else }}
{{- $_ := set $r "for" $o.for }}
{{- end }}
{{- end }}
{{- $labels := $r.labels | default dict }}
{{- if $o.severity }}
{{- $cur := toString (get $labels "severity") }}
{{- if contains "$labels" $cur }}
{{- /* A severity taken from a series label, with a default: only the default changes. */}}
{{- $_ := set $labels "severity" (regexReplaceAllLiteral "\"[^\"]*\" *}}$" $cur (printf "%s }}" (quote $o.severity))) }}
{{- else }}
{{- $_ := set $labels "severity" $o.severity }}
{{- end }}
{{- end }}
{{- /* The rule's own labels win over per-alert ones, which win over the chart-wide ones. */}}
{{- $merged := merge (dict) $labels ($o.additionalRuleLabels | default dict) (.pr.additionalRuleLabels | default dict) }}
{{- if $merged }}
{{- $_ := set $r "labels" $merged }}
{{- end }}
{{- $annotations := $r.annotations | default dict }}
{{- range $key, $value := $thresholds }}
{{- $marker := printf "# threshold: %s" $key }}
{{- $line := regexFind (printf "(?m)^.*%s *$" $marker) $r.expr }}
{{- if not $line }}
{{- $known := list }}
{{- range (regexFindAll "# threshold: [A-Za-z0-9]+" $r.expr -1) }}
{{- $known = append $known (trimPrefix "# threshold: " .) }}
{{- end }}
{{- fail (printf "prometheusRule.alerts.%s.thresholds.%s: %s has no such threshold (it has: %s)" $name $key $name (default "none" (join ", " $known))) }}
{{- end }}
{{- $cmp := regexFind "(<=|>=|==|!=|<|>) *[0-9][0-9.]*" $line }}
{{- if not $cmp }}
{{- fail (printf "files/alerts.yaml: %s: no comparison with a number on the line of %q" $name $marker) }}
{{- end }}
{{- $old := regexReplaceAll "^(<=|>=|==|!=|<|>) *" $cmp "" }}
{{- $op := trimSuffix $old $cmp }}
{{- $new := toString $value }}
{{- $_ := set $r "expr" (replace $line (replace $cmp (printf "%s%s" $op $new) $line) $r.expr) }}
{{- /* "threshold <old>" in the annotations: through a placeholder, so that one
new value equal to another threshold's old one is not replaced twice. */}}
{{- range $ak, $av := $annotations }}
{{- $_ := set $annotations $ak (replace (printf "threshold %s" $old) (printf "threshold @@%s@@" $key) $av) }}
{{- end }}
{{- end }}
{{- range $key, $value := $thresholds }}
{{- range $ak, $av := $annotations }}
{{- $_ := set $annotations $ak (replace (printf "@@%s@@" $key) (toString $value) $av) }}
{{- end }}
{{- end }}
{{- with $annotations.runbook_url }}
{{- $_ := set $annotations "runbook_url" (printf "%s%s" $.pr.runbookBaseUrl (regexFind "#.*$" .)) }}
{{- end }}
{{- end }}

{{/*
The seconds of a Prometheus duration (d: 30s, 5m, 1h30m; units y w d h m s ms,
largest first, each at most once), as a number; fails naming `what` otherwise.
*/}}
{{- define "webchecker-operator.durationSeconds" -}}
{{- $d := toString .d }}
{{- if or (eq $d "") (not (regexMatch "^([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$" $d)) }}
{{- fail (printf "%s: %q is not a Prometheus duration (such as 30s, 5m, 1h30m)" .what $d) }}
{{- end }}
{{- $ms := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 }}
{{- $total := 0 }}
{{- range (regexFindAll "[0-9]+(ms|[ywdhms])" $d -1) }}
{{- $unit := regexFind "[a-z]+$" . }}
{{- $total = add $total (mul (atoi (trimSuffix $unit .)) (get $ms $unit)) }}
{{- end }}
{{- if mod $total 1000 }}
{{- divf $total 1000 }}
{{- else }}
{{- div $total 1000 }}
{{- end }}
{{- end }}
